package fakediscord

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// Discord's limits on message components (discord.com/developers/docs,
// Component reference).
const (
	maxActionRows     = 5
	maxRowComponents  = 5
	maxButtonLabel    = 80
	maxCustomID       = 100
	maxButtonURL      = 512
	defaultInteractIn = 3 * time.Second
)

// Component types and the interaction types and flags the fake knows.
const (
	componentActionRow = 1
	componentButton    = 2
	buttonLink         = 5
	buttonPremium      = 6
	interactionComp    = 3
	// interactionModalSubmit is MODAL_SUBMIT.
	interactionModalSubmit = 5
	flagEphemeral          = 64
	// Flags an interaction response may set: SUPPRESS_EMBEDS, EPHEMERAL,
	// SUPPRESS_NOTIFICATIONS, IS_COMPONENTS_V2.
	responseFlags = flagSuppressEmbeds | flagEphemeral | flagSuppressNotifications | flagComponentsV2
)

// Interaction callback types.
const (
	callbackMessage         = 4 // CHANNEL_MESSAGE_WITH_SOURCE
	callbackDeferredMessage = 5 // DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE
	callbackDeferredUpdate  = 6 // DEFERRED_UPDATE_MESSAGE
	callbackUpdate          = 7 // UPDATE_MESSAGE
	callbackModal           = 9 // MODAL
)

// ErrNoButton is Click's error for a message without a button, enabled
// and not a link, that has the custom_id.
var ErrNoButton = errors.New("fakediscord: no such button")

// Response is one interaction callback as the fake answered it.
type Response struct {
	Type int            // the callback type: 4, 5, 6, 7, 9
	Data map[string]any // the callback's data, nil without one
	// Latency is the time from the INTERACTION_CREATE dispatch to the
	// callback's arrival; Discord accepts it within 3 s.
	Latency time.Duration
	Status  int // the HTTP status answered: 204, 400, 401, 404, 429
	Code    int // the Discord error code answered, if any
	At      time.Time
}

// interaction is an interaction the fake dispatched: a component's
// (Click, Select), a command's (Command) or a modal submission's
// (SubmitModal).
type interaction struct {
	id, token              string
	channel, message, user string // message: the component's message, "" for a command's
	guild                  string
	created                time.Time
	acked                  bool
	command                bool     // an application command's: its reply answers no message
	modalSubmit            bool     // a MODAL_SUBMIT: it takes no modal, and 6 or 7 only with a message
	submitted              *modal   // the modal a MODAL_SUBMIT submits, closed by its callback
	original               *Message // the deferred response, for the follow-up edit
	responses              []Response
}

// itype is the interaction's type: APPLICATION_COMMAND,
// MESSAGE_COMPONENT or MODAL_SUBMIT.
func (in *interaction) itype() int {
	switch {
	case in.command:
		return interactionCommand
	case in.modalSubmit:
		return interactionModalSubmit
	}
	return interactionComp
}

func (in *interaction) metadataJSON() map[string]any {
	owners := map[string]any{}
	if in.guild != "" {
		owners["0"] = in.guild
	}
	out := map[string]any{"id": in.id, "type": in.itype(), "user": interactionUserJSON(in.user), "authorizing_integration_owners": owners}
	if in.message != "" {
		out["interacted_message_id"] = in.message
	}
	return out
}

// interactionMemberJSON is the member an interaction in a guild carries;
// interactionPermissionsLocked sets its permissions in the channel.
func interactionMemberJSON(userID string) map[string]any {
	return map[string]any{"user": interactionUserJSON(userID), "roles": []any{}, "permissions": "0",
		"joined_at": "2026-01-01T00:00:00Z", "deaf": false, "mute": false, "flags": 0, "pending": false,
		"nick": nil, "avatar": nil, "premium_since": nil, "communication_disabled_until": nil}
}

func interactionUserJSON(id string) map[string]any {
	u := userJSON(id)
	u["global_name"] = "User " + id
	u["avatar"] = nil
	return u
}

// checkComponents checks a message's components as Discord does: only
// action rows at the top, at most 5, each with 1 to 5 buttons or one
// select menu (checkSelect); buttons with a label of at most 80
// characters, a custom_id of 1 to 100 characters unique in the message
// for styles 1 to 4, a url and no custom_id for style 5.
func checkComponents(list []any) *apiError {
	if len(list) > maxActionRows {
		return formError("components", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxActionRows))
	}
	ids := map[string]bool{}
	for i, raw := range list {
		if _, err := checkRow(raw, fmt.Sprintf("components.%d", i), ids); err != nil {
			return err
		}
	}
	return nil
}

// checkRow checks an action row at at: 1 to 5 buttons or one select menu,
// their custom_ids unique among ids. It returns how many components the
// row holds.
func checkRow(raw any, at string, ids map[string]bool) (int, *apiError) {
	row, ok := raw.(map[string]any)
	if !ok {
		return 0, formError(at, "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
	}
	if row["type"] != float64(componentActionRow) {
		return 0, formError(at+".type", "UNION_TYPE_CHOICES", "Value of field \"type\" must be one of (1,).")
	}
	children, ok := row["components"].([]any)
	if !ok || len(children) < 1 || len(children) > maxRowComponents {
		return 0, formError(at+".components", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxRowComponents))
	}
	for j, raw := range children {
		at := fmt.Sprintf("%s.components.%d", at, j)
		c, ok := raw.(map[string]any)
		if !ok {
			return 0, formError(at, "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
		}
		typ, _ := c["type"].(float64)
		switch typ {
		case componentButton:
			if err := checkButton(c, at); err != nil {
				return 0, err
			}
		case 3, 5, 6, 7, 8: // select menus take a whole row
			if len(children) > 1 {
				return 0, formError(at, "COMPONENT_LAYOUT_WIDTH_EXCEEDED", "The specified component exceeds the maximum width")
			}
			if err := checkSelect(c, at, false); err != nil {
				return 0, err
			}
		default:
			return 0, formError(at+".type", "UNION_TYPE_CHOICES", "Value of field \"type\" must be one of (2, 3, 5, 6, 7, 8).")
		}
		if err := uniqueCustomID(c, at, ids); err != nil {
			return 0, err
		}
	}
	return len(children), nil
}

// uniqueCustomID refuses a custom_id already used in the message.
func uniqueCustomID(c map[string]any, at string, ids map[string]bool) *apiError {
	if id, ok := c["custom_id"].(string); ok {
		if ids[id] {
			return formError(at+".custom_id", "COMPONENT_CUSTOM_ID_DUPLICATED", "Component custom id was already specified")
		}
		ids[id] = true
	}
	return nil
}

func checkButton(c map[string]any, at string) *apiError {
	if l, ok := c["label"]; ok && l != nil {
		label, ok := l.(string)
		if !ok {
			return formError(at+".label", "STRING_TYPE_CONVERT", "Could not interpret the value as string.")
		}
		if utf8.RuneCountInString(label) > maxButtonLabel {
			return formError(at+".label", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxButtonLabel))
		}
	}
	style, _ := c["style"].(float64)
	_, hasID := c["custom_id"]
	url, hasURL := c["url"].(string)
	switch style {
	case 1, 2, 3, 4:
		if hasURL {
			return formError(at+".url", "BUTTON_COMPONENT_URL_NOT_ALLOWED", "Only link buttons may have a url")
		}
		return checkCustomID(c, at)
	case buttonLink:
		if hasID {
			return formError(at+".custom_id", "BUTTON_COMPONENT_CUSTOM_ID_NOT_ALLOWED", "A link button cannot have a custom id")
		}
		if !hasURL || url == "" {
			return formError(at+".url", "BASE_TYPE_REQUIRED", "This field is required")
		}
		if utf8.RuneCountInString(url) > maxButtonURL {
			return formError(at+".url", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxButtonURL))
		}
	case buttonPremium:
		if hasID || hasURL {
			return formError(at, "BUTTON_COMPONENT_INVALID_PREMIUM", "A premium button takes a sku_id and no custom id or url")
		}
		if sku, _ := c["sku_id"].(string); sku == "" {
			return formError(at+".sku_id", "BASE_TYPE_REQUIRED", "This field is required")
		}
	default:
		return formError(at+".style", "BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3, 4, 5, 6}.")
	}
	return nil
}

func checkCustomID(c map[string]any, at string) *apiError {
	id, _ := c["custom_id"].(string)
	if id == "" {
		return formError(at+".custom_id", "BASE_TYPE_REQUIRED", "This field is required")
	}
	if utf8.RuneCountInString(id) > maxCustomID {
		return formError(at+".custom_id", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxCustomID))
	}
	return nil
}

// findButton returns the clickable button with customID among
// components, at any depth (in an action row, a container's action row or
// a section's accessory): enabled, not a link or premium button.
func findButton(components []map[string]any, customID string) map[string]any {
	for _, c := range components {
		if b := findButtonIn(c, customID); b != nil {
			return b
		}
	}
	return nil
}

func findButtonIn(c map[string]any, customID string) map[string]any {
	if c["type"] == float64(componentButton) {
		if c["custom_id"] != customID || c["disabled"] == true {
			return nil
		}
		if st, _ := c["style"].(float64); st == buttonLink || st == buttonPremium {
			return nil
		}
		return c
	}
	if acc, ok := c["accessory"].(map[string]any); ok {
		if b := findButtonIn(acc, customID); b != nil {
			return b
		}
	}
	children, _ := c["components"].([]any)
	for _, raw := range children {
		if child, ok := raw.(map[string]any); ok {
			if b := findButtonIn(child, customID); b != nil {
				return b
			}
		}
	}
	return nil
}

// Click has userID click the button with customID on the message
// messageID in channel: it dispatches the INTERACTION_CREATE Discord
// sends the bot (a component interaction with the full message, the
// member in a guild channel or the user in a DM, a token for the
// callback) and returns the interaction's id. The callback is accepted
// for InteractionWindow from now. It fails with ErrNoButton when the
// message does not exist or has no enabled, non-link button with that
// custom_id; nothing is dispatched then.
func (s *Server) Click(channel, messageID, userID, customID string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	ch, ok := s.channels[channel]
	if !ok {
		return "", fmt.Errorf("click %s in channel %s: unknown channel: %w", customID, channel, ErrNoButton)
	}
	m, ok := s.messages[messageID]
	if !ok || m.ChannelID != channel {
		return "", fmt.Errorf("click %s on message %s: unknown message: %w", customID, messageID, ErrNoButton)
	}
	if findButton(m.Components, customID) == nil {
		return "", fmt.Errorf("click %s on message %s: %w", customID, messageID, ErrNoButton)
	}
	if userID == "" {
		return "", errors.New("fakediscord: click by no user")
	}
	id, err := s.componentInteractionLocked(ch, m, userID, map[string]any{"custom_id": customID, "component_type": componentButton})
	if err != nil {
		return "", fmt.Errorf("click %s: %w", customID, err)
	}
	return id, nil
}

// newInteractionLocked makes an interaction by userID in ch, with its
// token, kept for the callback.
func (s *Server) newInteractionLocked(ch *channel, userID string) *interaction {
	id := s.idLocked()
	return &interaction{id: id, channel: ch.id, user: userID, guild: ch.guildID, created: time.Now(),
		token: base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("interaction:%s:%s%d", id, "fake", time.Now().UnixNano())))}
}

// componentInteractionLocked dispatches the MESSAGE_COMPONENT interaction
// of userID using a component of m in ch, with data, and returns its id.
func (s *Server) componentInteractionLocked(ch *channel, m *Message, userID string, data map[string]any) (string, error) {
	in := s.newInteractionLocked(ch, userID)
	in.message = m.ID
	ev := s.interactionEventLocked(ch, in, data)
	ev["message"] = s.messageJSONLocked(m)
	if err := s.interactionPermissionsLocked(ev, ch.id, userID); err != nil {
		return "", err
	}
	s.interactions[in.id] = in
	s.dispatchLocked("INTERACTION_CREATE", ev)
	return in.id, nil
}

// interactionEventLocked is the INTERACTION_CREATE of in with data, as
// Discord sends it: the member in a guild channel, the user in a DM.
func (s *Server) interactionEventLocked(ch *channel, in *interaction, data map[string]any) map[string]any {
	ev := map[string]any{
		"id": in.id, "application_id": BotID, "type": in.itype(), "token": in.token, "version": 1,
		"data":         data,
		"channel_id":   ch.id,
		"channel":      ch.json(),
		"locale":       "en-US",
		"entitlements": []any{},
		// 10 MiB, the attachment limit without boosts.
		"attachment_size_limit":          10485760,
		"authorizing_integration_owners": in.metadataJSON()["authorizing_integration_owners"],
	}
	if ch.guildID != "" {
		ev["guild_id"] = ch.guildID
		ev["guild_locale"] = "en-US"
		ev["guild"] = map[string]any{"id": ch.guildID, "locale": "en-US", "features": []any{}}
		ev["context"] = 0 // GUILD
		ev["member"] = interactionMemberJSON(in.user)
	} else {
		ev["context"] = 1 // BOT_DM
		ev["user"] = interactionUserJSON(in.user)
	}
	return ev
}

// Responses returns the callbacks made for the interaction, oldest first,
// refused ones too.
func (s *Server) Responses(interactionID string) []Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.interactions[interactionID]; ok {
		return append([]Response(nil), in.responses...)
	}
	return nil
}

// Ephemerals returns the ephemeral interaction replies in channel, oldest
// first, each with its Recipient and Interaction. They are not among the
// channel's Messages and cannot be fetched, edited or pinned through the
// channel routes.
func (s *Server) Ephemerals(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.ephemerals {
		if m.ChannelID == channel {
			out = append(out, *m)
		}
	}
	return out
}

// recordResponseLocked keeps a callback request with what was answered.
func (s *Server) recordResponseLocked(id string, body map[string]any, call Call, arrived time.Time) {
	in, ok := s.interactions[id]
	if !ok {
		return
	}
	typ, _ := body["type"].(float64)
	data, _ := body["data"].(map[string]any)
	in.responses = append(in.responses, Response{Type: int(typ), Data: data, Latency: arrived.Sub(in.created),
		Status: call.Status, Code: call.Code, At: call.At})
}

// callbackLocked answers POST /interactions/{id}/{token}/callback.
func (s *Server) callbackLocked(r *http.Request, rt route, body map[string]any, arrived time.Time) (int, any, *apiError) {
	if r.Method != http.MethodPost {
		return 0, nil, fail(405, 0, "405: Method Not Allowed")
	}
	// Each refusal is the client's fault: the user sees "This interaction
	// failed" or a second answer is lost.
	where := "interaction " + rt.parts[1]
	in, err := s.interactionLocked(r, rt, where, arrived)
	if err != nil {
		return 0, nil, err
	}
	typ, _ := body["type"].(float64)
	data, hasData := body["data"].(map[string]any)
	if !hasData {
		data = map[string]any{}
	}
	flags, _ := data["flags"].(float64)
	if int(flags)&^responseFlags != 0 {
		return s.violationLocked(r, where, formError("data.flags", "BASE_TYPE_CHOICES", "Only SUPPRESS_EMBEDS, EPHEMERAL and SUPPRESS_NOTIFICATIONS may be set."))
	}
	if in.modalSubmit {
		// MODAL is "Not available for MODAL_SUBMIT"; DEFERRED_UPDATE_MESSAGE and
		// UPDATE_MESSAGE are "Only valid for component-based interactions",
		// which a modal opened from a component is.
		switch {
		case typ == callbackModal:
			return s.violationLocked(r, where, formError("type", "INTERACTION_RESPONSE_TYPE_INVALID", "A modal submission cannot be answered with a modal."))
		case (typ == callbackDeferredUpdate || typ == callbackUpdate) && in.message == "":
			return s.violationLocked(r, where, formError("type", "INTERACTION_RESPONSE_TYPE_INVALID", "Only a modal opened from a message component can update its message."))
		}
	}
	cb := &callbackReq{r: r, where: where, in: in, ch: s.channels[in.channel], data: data, flags: int(flags)}
	var resource map[string]any
	switch typ {
	case callbackMessage:
		resource, err = s.replyLocked(cb)
	case callbackUpdate:
		resource, err = s.updateClickedLocked(cb)
	case callbackDeferredMessage:
		resource, err = s.deferReplyLocked(cb)
	case callbackDeferredUpdate:
		resource = map[string]any{"type": int(typ)}
	case callbackModal:
		resource, err = s.modalLocked(cb)
	default:
		// PONG answers PING and autocomplete results an autocomplete
		// interaction, not a button.
		return s.violationLocked(r, where, formError("type", "BASE_TYPE_CHOICES", "Value must be one of {4, 5, 6, 7, 9}."))
	}
	if err != nil {
		return 0, nil, err
	}
	in.acked = true
	if in.modalSubmit {
		s.closeModalLocked(in)
	}
	if r.URL.Query().Get("with_response") == "true" {
		return 200, map[string]any{"interaction": map[string]any{"id": in.id, "type": in.itype(),
			"response_message_loading": typ == callbackDeferredMessage, "response_message_ephemeral": int(flags)&flagEphemeral != 0},
			"resource": resource}, nil
	}
	return 204, nil, nil
}

// callbackReq is an interaction callback being answered.
type callbackReq struct {
	r     *http.Request
	where string // "interaction <id>", for violations
	in    *interaction
	ch    *channel // the interaction's channel, nil if it is gone
	data  map[string]any
	flags int
}

// interactionLocked is the interaction a callback answers: known, its
// token, not acknowledged yet, and within the window to answer it.
func (s *Server) interactionLocked(r *http.Request, rt route, where string, arrived time.Time) (*interaction, *apiError) {
	in, ok := s.interactions[rt.parts[1]]
	switch {
	case !ok:
		return nil, s.refusedLocked(r, where, fail(http.StatusNotFound, codeUnknownInteraction, "Unknown interaction"))
	case rt.parts[2] != in.token:
		return nil, s.refusedLocked(r, where, fail(http.StatusUnauthorized, codeInvalidWebhookTok, "Invalid Webhook Token"))
	case in.acked:
		return nil, s.refusedLocked(r, where, fail(http.StatusBadRequest, codeAlreadyAcked, "Interaction has already been acknowledged."))
	}
	window := s.InteractionWindow
	if window <= 0 {
		window = defaultInteractIn
	}
	if late := arrived.Sub(in.created); late > window {
		s.violations = append(s.violations, fmt.Sprintf("interaction %s answered %s after it was created, limit %s", in.id, late.Round(time.Millisecond), window))
		return nil, fail(http.StatusNotFound, codeUnknownInteraction, "Unknown interaction")
	}
	return in, nil
}

// refusedLocked records the client's fault err as a violation and
// returns it.
func (s *Server) refusedLocked(r *http.Request, where string, err *apiError) *apiError {
	_, _, err = s.violationLocked(r, where, err)
	return err
}

// replyLocked answers with a message: an ephemeral one for the user, or
// one in the channel, a reply to the clicked message (a command's reply
// is a message of its own).
func (s *Server) replyLocked(cb *callbackReq) (map[string]any, *apiError) {
	in := cb.in
	m := &Message{ChannelID: in.channel, AuthorID: BotID, Interaction: in.id}
	if err := s.applyLocked(m, cb.data, false); err != nil {
		return nil, s.refusedLocked(cb.r, cb.where, dataError(err))
	}
	if cb.flags&flagEphemeral != 0 {
		m.ID, m.at, m.Flags, m.Recipient = s.idLocked(), time.Now(), cb.flags, in.user
		s.ephemerals = append(s.ephemerals, m)
	} else {
		if cb.ch == nil || cb.ch.archived && cb.ch.locked {
			return nil, fail(400, codeThreadArchived, "Thread is archived")
		}
		m.Type, m.Reference, m.Flags = 19, in.message, cb.flags
		if in.message == "" { // a command's, or a submission of a command's modal
			m.Type, m.Reference = 20, ""
		}
		s.createLocked(cb.ch, m)
	}
	return map[string]any{"type": callbackMessage, "message": s.messageJSONLocked(m)}, nil
}

// updateClickedLocked answers by editing the clicked message.
func (s *Server) updateClickedLocked(cb *callbackReq) (map[string]any, *apiError) {
	m, ok := s.messages[cb.in.message]
	if !ok {
		return nil, fail(404, codeUnknownMessage, "Unknown Message")
	}
	if cb.ch != nil && cb.ch.archived {
		return nil, fail(400, codeThreadArchived, "Thread is archived")
	}
	edited := *m
	if err := s.applyLocked(&edited, cb.data, false); err != nil {
		return nil, s.refusedLocked(cb.r, cb.where, dataError(err))
	}
	*m = edited
	m.Edits++
	m.edited = time.Now()
	s.dispatchLocked("MESSAGE_UPDATE", s.messageJSONLocked(m))
	return map[string]any{"type": callbackUpdate, "message": s.messageJSONLocked(m)}, nil
}

// deferReplyLocked answers "pinplan is thinking...": a message the
// follow-up edit (PATCH /webhooks/{app}/{token}/messages/@original)
// fills in.
func (s *Server) deferReplyLocked(cb *callbackReq) (map[string]any, *apiError) {
	in := cb.in
	m := &Message{ChannelID: in.channel, AuthorID: BotID, Interaction: in.id, Flags: cb.flags | flagLoading}
	if cb.flags&flagEphemeral != 0 {
		m.ID, m.at, m.Recipient = s.idLocked(), time.Now(), in.user
		s.ephemerals = append(s.ephemerals, m)
	} else {
		if cb.ch == nil {
			return nil, fail(404, codeUnknownChannel, "Unknown Channel")
		}
		m.Type = 20
		s.createLocked(cb.ch, m)
	}
	in.original = m
	return map[string]any{"type": callbackDeferredMessage}, nil
}

// dataError moves the fields of a 50035 under data, where a callback
// carries the message.
func dataError(err *apiError) *apiError {
	if err.errors == nil {
		return err
	}
	out := *err
	out.errors = map[string]any{}
	for k, v := range err.errors {
		out.errors["data."+strings.TrimPrefix(k, "data.")] = v
	}
	return &out
}

// flagLoading is a deferred response's LOADING flag ("is thinking...").
const flagLoading = 1 << 7

// webhookLife is how long an interaction's token takes follow-ups.
const webhookLife = 15 * time.Minute

// originalLocked answers PATCH /webhooks/{app}/{token}/messages/@original:
// the deferred response filled in, within 15 minutes of the interaction,
// authorized by its token alone.
func (s *Server) originalLocked(r *http.Request, rt route, body map[string]any) (int, any, *apiError) {
	if r.Method != http.MethodPatch {
		return 0, nil, fail(405, 0, "405: Method Not Allowed")
	}
	var in *interaction
	for _, c := range s.interactions {
		if c.token == rt.parts[2] {
			in = c
		}
	}
	where := "webhook @original"
	switch {
	case rt.parts[1] != BotID || in == nil:
		return s.violationLocked(r, where, fail(http.StatusUnauthorized, codeInvalidWebhookTok, "Invalid Webhook Token"))
	case time.Since(in.created) > webhookLife:
		return s.violationLocked(r, where, fail(http.StatusUnauthorized, codeInvalidWebhookTok, "Invalid Webhook Token"))
	case in.original == nil:
		return s.violationLocked(r, where, fail(http.StatusNotFound, codeUnknownMessage, "Unknown Message"))
	}
	edited := *in.original
	if err := s.applyLocked(&edited, body, false); err != nil {
		return s.violationLocked(r, where, err)
	}
	edited.Flags &^= flagLoading
	*in.original = edited
	in.original.Edits++
	in.original.edited = time.Now()
	return 200, s.messageJSONLocked(in.original), nil
}
