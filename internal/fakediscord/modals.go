package fakediscord

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Modals as Discord has them: a MODAL callback (type 9) to a command's or
// a component's interaction shows the user a modal
// (discord.com/developers/docs/interactions/receiving-and-responding,
// Modal: a custom_id of 1 to 100 characters, a title of at most 45,
// "Between 1 and 5 (inclusive) components"). Its components
// (.../components/reference) are action rows holding one text input (the
// older form, the one discordgo v0.29 can send) or labels (a label of at
// most 45 characters, a description of at most 100) wrapping a text input
// or a select, and text displays. A text input has a custom_id of 1 to
// 100, style 1 (short) or 2 (paragraph), min_length 0 to 4000,
// max_length 1 to 4000, a value of at most 4000, a placeholder of at most
// 100, and in an action row its own label of 1 to 45 characters.
const (
	componentTextInput  = 4
	componentLabel      = 18
	componentFileUpload = 19

	maxModalTitle           = 45
	maxModalComponents      = 5
	maxInputLabel           = 45 // a text input's label in an action row, a Label's label
	maxLabelDescription     = 100
	maxTextInputLength      = 4000 // min_length, max_length, value
	maxTextInputPlaceholder = 100
)

// ErrNoModal is SubmitModal's error when the user has no open modal with
// that custom_id: none was shown to them, or another was.
var ErrNoModal = errors.New("fakediscord: no such open modal")

// ErrNotInModal is SubmitModal's error for values the user could not
// have submitted: for no text input or string select of the modal, a
// required one left empty, a text outside its min_length and max_length,
// an option the select does not offer.
var ErrNotInModal = errors.New("fakediscord: not an input of the modal")

// modal is a modal shown to a user, open until the bot answers its
// submission.
type modal struct {
	user, customID, title         string
	components                    []any
	interaction, channel, message string // the interaction the MODAL callback answered, and where
}

// Modal is the modal open for a user.
type Modal struct {
	CustomID, Title string
	Components      []map[string]any
	// Interaction is the interaction the MODAL callback answered; Channel
	// is where it was, Message the component's message ("" for a
	// command's modal).
	Interaction, Channel, Message string
}

// OpenModal returns the modal open for userID: shown by a MODAL callback,
// until the bot answers its submission.
func (s *Server) OpenModal(userID string) (Modal, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	md, ok := s.modals[userID]
	if !ok {
		return Modal{}, false
	}
	out := Modal{CustomID: md.customID, Title: md.title, Interaction: md.interaction, Channel: md.channel, Message: md.message}
	for _, c := range md.components {
		if m, ok := c.(map[string]any); ok {
			out.Components = append(out.Components, m)
		}
	}
	return out, true
}

// modalLocked answers a MODAL callback: a modal checked as Discord checks
// it, shown to the interaction's user (replacing one they had open).
func (s *Server) modalLocked(cb *callbackReq) (map[string]any, *apiError) {
	if err := checkModal(cb.data); err != nil {
		return nil, s.refusedLocked(cb.r, cb.where, err)
	}
	comps, _ := cb.data["components"].([]any)
	id, _ := cb.data["custom_id"].(string)
	title, _ := cb.data["title"].(string)
	s.modals[cb.in.user] = &modal{user: cb.in.user, customID: id, title: title, components: comps,
		interaction: cb.in.id, channel: cb.in.channel, message: cb.in.message}
	return map[string]any{"type": callbackModal}, nil
}

// closeModalLocked closes the modal whose submission in answers.
func (s *Server) closeModalLocked(in *interaction) {
	if md := s.modals[in.user]; md != nil && md == in.submitted {
		delete(s.modals, in.user)
	}
}

// checkModal checks a MODAL callback's data.
func checkModal(data map[string]any) *apiError {
	id, _ := data["custom_id"].(string)
	if n := utf8.RuneCountInString(id); n < 1 || n > maxCustomID {
		return formError("data.custom_id", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxCustomID))
	}
	title, _ := data["title"].(string)
	if n := utf8.RuneCountInString(title); n < 1 || n > maxModalTitle {
		return formError("data.title", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxModalTitle))
	}
	comps, _ := data["components"].([]any)
	if len(comps) < 1 || len(comps) > maxModalComponents {
		return formError("data.components", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxModalComponents))
	}
	ids := map[string]bool{}
	for i, raw := range comps {
		at := fmt.Sprintf("data.components.%d", i)
		c, ok := raw.(map[string]any)
		if !ok {
			return formError(at, "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
		}
		var input map[string]any
		switch c["type"] {
		case float64(componentActionRow):
			children, _ := c["components"].([]any)
			if len(children) != 1 {
				return formError(at+".components", "BASE_TYPE_BAD_LENGTH", "Must be 1 in length.")
			}
			at += ".components.0"
			input, _ = children[0].(map[string]any)
			if input["type"] != float64(componentTextInput) {
				return formError(at+".type", "UNION_TYPE_CHOICES", "Value of field \"type\" must be one of (4,).")
			}
			if err := checkTextInput(input, at, true); err != nil {
				return err
			}
		case float64(componentLabel):
			label, _ := c["label"].(string)
			if n := utf8.RuneCountInString(label); n < 1 || n > maxInputLabel {
				return formError(at+".label", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxInputLabel))
			}
			if d, ok := c["description"].(string); ok && utf8.RuneCountInString(d) > maxLabelDescription {
				return formError(at+".description", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxLabelDescription))
			}
			at += ".component"
			input, _ = c["component"].(map[string]any)
			var err *apiError
			switch input["type"] {
			case float64(componentTextInput):
				err = checkTextInput(input, at, false)
			case float64(componentStringSelect), 5.0, 6.0, 7.0, 8.0:
				err = checkSelect(input, at, true)
			case float64(componentFileUpload):
				err = checkCustomID(input, at)
			default:
				err = formError(at+".type", "UNION_TYPE_CHOICES", "Value of field \"type\" must be one of (3, 4, 5, 6, 7, 8, 19).")
			}
			if err != nil {
				return err
			}
		case float64(componentTextDisplay):
			if content, _ := c["content"].(string); content == "" {
				return formError(at+".content", "BASE_TYPE_REQUIRED", "This field is required")
			}
			continue
		default:
			return formError(at+".type", "UNION_TYPE_CHOICES", "Value of field \"type\" must be one of (1, 10, 18).")
		}
		if err := uniqueCustomID(input, at, ids); err != nil {
			return err
		}
	}
	return nil
}

// checkTextInput checks a text input at at; withLabel: in an action row,
// where it carries its own label.
func checkTextInput(c map[string]any, at string, withLabel bool) *apiError {
	if err := checkCustomID(c, at); err != nil {
		return err
	}
	if st, _ := c["style"].(float64); st != 1 && st != 2 {
		return formError(at+".style", "BASE_TYPE_CHOICES", "Value must be one of {1, 2}.")
	}
	label, _ := c["label"].(string)
	n := utf8.RuneCountInString(label)
	if (withLabel && n < 1) || n > maxInputLabel {
		return formError(at+".label", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxInputLabel))
	}
	minL, hasMin, err := intValue(c, "min_length", at)
	if err != nil {
		return err
	}
	maxL, hasMax, err := intValue(c, "max_length", at)
	if err != nil {
		return err
	}
	if hasMin && (minL < 0 || minL > maxTextInputLength) {
		return formError(at+".min_length", "NUMBER_TYPE_MAX", fmt.Sprintf("int value should be between 0 and %d.", maxTextInputLength))
	}
	if hasMax && (maxL < 1 || maxL > maxTextInputLength) {
		return formError(at+".max_length", "NUMBER_TYPE_MAX", fmt.Sprintf("int value should be between 1 and %d.", maxTextInputLength))
	}
	if hasMin && hasMax && minL > maxL {
		return formError(at+".min_length", "TEXT_INPUT_MIN_LENGTH_TOO_HIGH", "min_length must be less than or equal to max_length.")
	}
	for _, f := range []struct {
		key string
		max int
	}{{"value", maxTextInputLength}, {"placeholder", maxTextInputPlaceholder}} {
		v, ok := c[f.key]
		if !ok || v == nil {
			continue
		}
		str, isString := v.(string)
		if !isString {
			return formError(at+"."+f.key, "STRING_TYPE_CONVERT", "Could not interpret the value as string.")
		}
		if utf8.RuneCountInString(str) > f.max {
			return formError(at+"."+f.key, "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", f.max))
		}
	}
	if r, ok := c["required"]; ok && r != nil {
		if _, isBool := r.(bool); !isBool {
			return formError(at+".required", "BOOLEAN_TYPE_CONVERT", "Must be either true or false.")
		}
	}
	return nil
}

// SubmitModal has userID submit the modal with customID open for them,
// with values by custom_id (the text of a text input, the value of a
// string select's option; a text input left out keeps its prefilled
// value): it dispatches the INTERACTION_CREATE Discord sends, a
// MODAL_SUBMIT (type 5) with data.custom_id and data.components in the
// modal's own layout (action rows holding {type 4, custom_id, value}, or
// labels holding one component), the member or user, the channel, a
// token, and the message when the modal answered a component. It
// returns the interaction's id; its callback takes 4 and 5, and 6 and 7
// only for a modal opened from a message component. The modal closes
// when a callback is accepted. It fails with ErrNoModal when userID has
// no open modal with customID, and ErrNotInModal for values they could
// not have submitted; nothing is dispatched then. A modal of labels
// makes a submission discordgo v0.29 cannot decode (it knows no type 18).
func (s *Server) SubmitModal(userID, customID string, values map[string]string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	md, ok := s.modals[userID]
	if !ok || md.customID != customID {
		return "", fmt.Errorf("submit modal %s as %s: %w", customID, userID, ErrNoModal)
	}
	ch, ok := s.channels[md.channel]
	if !ok {
		return "", fmt.Errorf("submit modal %s: its channel %s is gone: %w", customID, md.channel, ErrNoModal)
	}
	used := map[string]bool{}
	next := 0
	idOf := func(c map[string]any) any {
		next++
		if id, ok := c["id"]; ok {
			return id
		}
		return next
	}
	var comps []any
	for _, raw := range md.components {
		c, _ := raw.(map[string]any)
		switch c["type"] {
		case float64(componentActionRow):
			children, _ := c["components"].([]any)
			input, _ := children[0].(map[string]any)
			id := idOf(c)
			out, err := submitted(input, values, used, idOf)
			if err != nil {
				return "", fmt.Errorf("submit modal %s: %w", customID, err)
			}
			comps = append(comps, map[string]any{"type": componentActionRow, "id": id, "components": []any{out}})
		case float64(componentLabel):
			input, _ := c["component"].(map[string]any)
			id := idOf(c)
			out, err := submitted(input, values, used, idOf)
			if err != nil {
				return "", fmt.Errorf("submit modal %s: %w", customID, err)
			}
			comps = append(comps, map[string]any{"type": componentLabel, "id": id, "component": out})
		case float64(componentTextDisplay):
			comps = append(comps, map[string]any{"type": componentTextDisplay, "id": idOf(c)})
		}
	}
	var unknown []string
	for k := range values {
		if !used[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return "", fmt.Errorf("submit modal %s: %s: %w", customID, strings.Join(unknown, ", "), ErrNotInModal)
	}
	in := s.newInteractionLocked(ch, userID)
	in.modalSubmit, in.message, in.submitted = true, md.message, md
	ev := s.interactionEventLocked(ch, in, map[string]any{"custom_id": customID, "components": comps})
	if m, ok := s.messages[md.message]; ok {
		ev["message"] = s.messageJSONLocked(m)
	}
	if err := s.interactionPermissionsLocked(ev, ch.id, userID); err != nil {
		return "", fmt.Errorf("submit modal %s: %w", customID, err)
	}
	s.interactions[in.id] = in
	s.dispatchLocked("INTERACTION_CREATE", ev)
	return in.id, nil
}

// submitted is what a modal submission carries for input, a text input
// or a string select, with values entered; it refuses what the user
// could not have submitted.
func submitted(input map[string]any, values map[string]string, used map[string]bool, idOf func(map[string]any) any) (map[string]any, error) {
	cid, _ := input["custom_id"].(string)
	v, given := values[cid]
	if given {
		used[cid] = true
	}
	required := input["required"] != false
	out := map[string]any{"type": input["type"], "id": idOf(input), "custom_id": cid}
	switch input["type"] {
	case float64(componentTextInput):
		if !given {
			v, _ = input["value"].(string)
		}
		n := utf8.RuneCountInString(v)
		minL, maxL := 0, maxTextInputLength
		if f, ok := input["min_length"].(float64); ok {
			minL = int(f)
		}
		if f, ok := input["max_length"].(float64); ok {
			maxL = int(f)
		}
		switch {
		case n == 0 && required:
			return nil, fmt.Errorf("%s is required: %w", cid, ErrNotInModal)
		case n > 0 && (n < minL || n > maxL):
			return nil, fmt.Errorf("%s: %d characters, it takes %d to %d: %w", cid, n, minL, maxL, ErrNotInModal)
		}
		out["value"] = v
	case float64(componentStringSelect):
		picked := []string{}
		if v != "" {
			picked = []string{v}
		}
		if len(picked) == 0 && !required {
			out["values"] = []any{}
			break
		}
		if err := pickable(input, picked); err != nil {
			return nil, fmt.Errorf("%s: %v: %w", cid, err, ErrNotInModal)
		}
		out["values"] = []any{v}
	default:
		if given || required {
			return nil, fmt.Errorf("%s: the fake fills only text inputs and string selects: %w", cid, ErrNotInModal)
		}
		out["values"] = []any{}
	}
	return out, nil
}
