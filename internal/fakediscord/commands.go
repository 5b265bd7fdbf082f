package fakediscord

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"
	"unicode/utf8"
)

// Application commands, as Discord keeps them (discord.com/developers/
// docs, Application Commands): a global set and a set per guild, each
// replaced whole by a bulk overwrite (PUT
// /applications/{app}/commands, /applications/{app}/guilds/{guild}/commands)
// and checked as Discord checks them: a CHAT_INPUT name of 1 to 32
// lowercase letters, digits, - or _; a description of 1 to 100
// characters; at most 25 options, subcommands (type 1) holding options
// of their own, required options before optional ones. A user can only
// run a command registered for the guild of the channel or globally
// (Command).

const (
	interactionCommand = 2 // APPLICATION_COMMAND
	optSubcommand      = 1
	optString          = 3
	maxOptions         = 25
)

var reCommandName = regexp.MustCompile(`^[-_\p{Ll}\p{N}]{1,32}$`)

// ErrNoCommand is Command's error for a command not registered where the
// user runs it.
var ErrNoCommand = errors.New("fakediscord: no such command here")

// commandSet is a registered set of commands, by name.
type commandSet map[string]map[string]any

// Overwrites counts the bulk overwrites of command sets, by scope
// ("global" or a guild id).
func (s *Server) Overwrites() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.overwrites {
		out[k] = v
	}
	return out
}

// Commands returns the commands registered for scope ("global" or a
// guild id), by name.
func (s *Server) Commands(scope string) map[string]map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]any{}
	for k, v := range s.commands[scope] {
		out[k] = v
	}
	return out
}

// commandsLocked answers GET and PUT on a command set.
func (s *Server) commandsLocked(r *http.Request, rt route, body []any) (int, any, *apiError) {
	if rt.parts[1] != BotID {
		return 0, nil, fail(http.StatusForbidden, 50001, "Missing Access")
	}
	scope := "global"
	if len(rt.parts) == 5 {
		scope = rt.parts[3]
		if !s.guildExistsLocked(scope) {
			return 0, nil, fail(http.StatusForbidden, 50001, "Missing Access")
		}
	}
	switch r.Method {
	case http.MethodGet:
		out := []any{}
		for _, c := range s.commands[scope] {
			out = append(out, c)
		}
		return 200, out, nil
	case http.MethodPut:
	default:
		return 0, nil, fail(405, 0, "405: Method Not Allowed")
	}
	set := commandSet{}
	out := []any{}
	for i, raw := range body {
		c, ok := raw.(map[string]any)
		if !ok {
			return 0, nil, formError(fmt.Sprint(i), "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
		}
		if err := checkCommand(c, fmt.Sprint(i)); err != nil {
			return 0, nil, err
		}
		name := c["name"].(string)
		if _, dup := set[name]; dup {
			return 0, nil, formError(fmt.Sprint(i)+".name", "APPLICATION_COMMAND_ALREADY_EXISTS", "Application command names must be unique")
		}
		stored := map[string]any{}
		for k, v := range c {
			stored[k] = v
		}
		if old, ok := s.commands[scope][name]; ok {
			stored["id"] = old["id"] // an overwrite keeps a command's id
		} else {
			stored["id"] = s.idLocked()
		}
		stored["application_id"], stored["version"] = BotID, s.idLocked()
		if scope != "global" {
			stored["guild_id"] = scope
		}
		if _, ok := stored["type"]; !ok {
			stored["type"] = 1.0
		}
		set[name] = stored
		out = append(out, stored)
	}
	if s.commands == nil {
		s.commands = map[string]commandSet{}
		s.overwrites = map[string]int{}
	}
	s.commands[scope] = set
	s.overwrites[scope]++
	return 200, out, nil
}

// checkCommand checks a CHAT_INPUT command at at.
func checkCommand(c map[string]any, at string) *apiError {
	if t, ok := c["type"].(float64); ok && t != 1 {
		return formError(at+".type", "BASE_TYPE_CHOICES", "Only CHAT_INPUT commands are known to the fake.")
	}
	return checkNamed(c, at, 0)
}

// checkNamed checks a command or an option: name, description, options.
func checkNamed(c map[string]any, at string, depth int) *apiError {
	name, _ := c["name"].(string)
	if !reCommandName.MatchString(name) {
		return formError(at+".name", "APPLICATION_COMMAND_INVALID_NAME", "Command name is invalid")
	}
	desc, _ := c["description"].(string)
	if n := utf8.RuneCountInString(desc); n < 1 || n > 100 {
		return formError(at+".description", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
	}
	opts, _ := c["options"].([]any)
	if len(opts) > maxOptions {
		return formError(at+".options", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxOptions))
	}
	optional := false
	for i, raw := range opts {
		o, ok := raw.(map[string]any)
		at := fmt.Sprintf("%s.options.%d", at, i)
		if !ok {
			return formError(at, "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
		}
		typ, _ := o["type"].(float64)
		switch {
		case typ == optSubcommand && depth == 0:
			if err := checkNamed(o, at, depth+1); err != nil {
				return err
			}
		case typ == optSubcommand:
			return formError(at+".type", "APPLICATION_COMMAND_OPTIONS_TYPE_INVALID", "Subcommands cannot be nested here")
		case typ >= 3 && typ <= 11:
			if err := checkNamed(o, at, depth+1); err != nil {
				return err
			}
			if ml, ok := o["max_length"].(float64); ok && (ml < 1 || ml > 6000) {
				return formError(at+".max_length", "NUMBER_TYPE_MAX", "int value should be less than or equal to 6000.")
			}
			if req, _ := o["required"].(bool); req && optional {
				return formError(at+".required", "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID", "Required options must be placed before non-required options")
			} else if !req {
				optional = true
			}
		default:
			return formError(at+".type", "BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}.")
		}
	}
	return nil
}

// Command has userID run /name sub in channel, with options for the
// subcommand (string values): it dispatches the INTERACTION_CREATE
// Discord sends (an APPLICATION_COMMAND interaction with the resolved
// subcommand and its options, the member in a guild channel, a token for
// the callback) and returns the interaction's id. It fails with
// ErrNoCommand when no such command with that subcommand is registered
// for the channel's guild or globally, and with ErrNoAccess when the user
// cannot see the channel: the user could not have run it. The member's
// and the bot's permissions in the channel come with it.
func (s *Server) Command(channel, userID, name, sub string, options map[string]string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	ch, ok := s.channels[channel]
	if !ok {
		return "", fmt.Errorf("/%s in %s: unknown channel: %w", name, channel, ErrNoCommand)
	}
	guild := ch.guildID
	if ch.parentID != "" {
		if p, ok := s.channels[ch.parentID]; ok {
			guild = p.guildID
		}
	}
	cmd, ok := s.commands[guild][name]
	if !ok {
		cmd, ok = s.commands["global"][name]
	}
	if !ok {
		return "", fmt.Errorf("/%s in %s: %w", name, channel, ErrNoCommand)
	}
	var subOpts []any
	found := sub == ""
	list, _ := cmd["options"].([]any)
	for _, raw := range list {
		o, _ := raw.(map[string]any)
		if o["name"] == sub && o["type"] == float64(optSubcommand) {
			found = true
			declared, _ := o["options"].([]any)
			for _, d := range declared {
				dm, _ := d.(map[string]any)
				n, _ := dm["name"].(string)
				if v, ok := options[n]; ok {
					subOpts = append(subOpts, map[string]any{"name": n, "type": dm["type"], "value": v})
				} else if req, _ := dm["required"].(bool); req {
					return "", fmt.Errorf("/%s %s: option %s is required", name, sub, n)
				}
			}
		}
	}
	if !found {
		return "", fmt.Errorf("/%s %s: %w", name, sub, ErrNoCommand)
	}
	id := s.idLocked()
	in := &interaction{id: id, channel: channel, user: userID, guild: guild, created: time.Now(), command: true,
		token: base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("interaction:%s:%s%d", id, "fake", time.Now().UnixNano())))}
	data := map[string]any{"id": cmd["id"], "name": name, "type": 1}
	if sub != "" {
		data["options"] = []any{map[string]any{"name": sub, "type": optSubcommand, "options": subOpts}}
	}
	if guild != "" {
		data["guild_id"] = guild
	}
	ev := map[string]any{
		"id": id, "application_id": BotID, "type": interactionCommand, "token": in.token, "version": 1,
		"data": data, "channel_id": channel, "channel": ch.json(),
		"locale": "en-US", "entitlements": []any{}, "attachment_size_limit": 10485760,
		"authorizing_integration_owners": map[string]any{"0": guild},
	}
	if guild != "" {
		ev["guild_id"], ev["guild_locale"], ev["context"] = guild, "en-US", 0
		ev["member"] = interactionMemberJSON(userID)
	} else {
		ev["context"], ev["user"] = 1, interactionUserJSON(userID)
	}
	if err := s.interactionPermissionsLocked(ev, channel, userID); err != nil {
		return "", fmt.Errorf("/%s %s: %w", name, sub, err)
	}
	s.interactions[id] = in
	s.dispatchLocked("INTERACTION_CREATE", ev)
	return id, nil
}
