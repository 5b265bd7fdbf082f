package fakediscord

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// String select menus (discord.com/developers/docs/components/reference,
// String Select): in a message, alone in an action row; a custom_id of 1
// to 100 characters unique in the message; 1 to 25 options, each with a
// label and a value of 1 to 100 characters (values unique) and a
// description of at most 100; a placeholder of at most 150; min_values 0
// to 25 and max_values 1 to 25 (both default 1).
const (
	componentStringSelect = 3
	maxSelectOptions      = 25
	maxOptionLabel        = 100 // label, value and description
	maxSelectPlaceholder  = 150
	maxSelectValues       = 25
)

// ErrNoSelect is Select's error for a message without an enabled string
// select with the custom_id, or values the person could not have picked
// (not among its options, repeated, fewer than min_values or more than
// max_values): nothing is dispatched then.
var ErrNoSelect = errors.New("fakediscord: no such select option")

// checkSelect checks a select menu at at: a custom_id, and for a string
// select its options, placeholder and value counts. inModal: a modal's
// select, which may not be disabled.
func checkSelect(c map[string]any, at string, inModal bool) *apiError {
	if err := checkCustomID(c, at); err != nil {
		return err
	}
	if p, ok := c["placeholder"]; ok && p != nil {
		ps, isString := p.(string)
		if !isString {
			return formError(at+".placeholder", "STRING_TYPE_CONVERT", "Could not interpret the value as string.")
		}
		if utf8.RuneCountInString(ps) > maxSelectPlaceholder {
			return formError(at+".placeholder", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxSelectPlaceholder))
		}
	}
	minV, hasMin, err := intValue(c, "min_values", at)
	if err != nil {
		return err
	}
	maxV, hasMax, err := intValue(c, "max_values", at)
	if err != nil {
		return err
	}
	if hasMin && (minV < 0 || minV > maxSelectValues) {
		return formError(at+".min_values", "NUMBER_TYPE_MAX", fmt.Sprintf("int value should be between 0 and %d.", maxSelectValues))
	}
	if hasMax && (maxV < 1 || maxV > maxSelectValues) {
		return formError(at+".max_values", "NUMBER_TYPE_MAX", fmt.Sprintf("int value should be between 1 and %d.", maxSelectValues))
	}
	if !hasMin {
		minV = 1
	}
	if !hasMax {
		maxV = 1
	}
	if minV > maxV {
		return formError(at+".min_values", "SELECT_COMPONENT_MIN_VALUES_TOO_HIGH", "min_values must be less than or equal to max_values.")
	}
	if d, ok := c["disabled"]; ok && d != nil {
		on, isBool := d.(bool)
		if !isBool {
			return formError(at+".disabled", "BOOLEAN_TYPE_CONVERT", "Must be either true or false.")
		}
		if on && inModal {
			return formError(at+".disabled", "COMPONENT_DISABLED_IN_MODAL", "Modals cannot have disabled components.")
		}
	}
	if c["type"] != float64(componentStringSelect) {
		return nil
	}
	opts, _ := c["options"].([]any)
	if len(opts) < 1 || len(opts) > maxSelectOptions {
		return formError(at+".options", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxSelectOptions))
	}
	values := map[string]bool{}
	for i, raw := range opts {
		oat := fmt.Sprintf("%s.options.%d", at, i)
		o, ok := raw.(map[string]any)
		if !ok {
			return formError(oat, "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
		}
		for _, k := range []string{"label", "value"} {
			v, _ := o[k].(string)
			if n := utf8.RuneCountInString(v); n < 1 || n > maxOptionLabel {
				return formError(oat+"."+k, "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxOptionLabel))
			}
		}
		if d, ok := o["description"]; ok && d != nil {
			ds, _ := d.(string)
			if utf8.RuneCountInString(ds) > maxOptionLabel {
				return formError(oat+".description", "BASE_TYPE_MAX_LENGTH", fmt.Sprintf("Must be %d or fewer in length.", maxOptionLabel))
			}
		}
		v := o["value"].(string)
		if values[v] {
			return formError(oat+".value", "SELECT_COMPONENT_OPTION_VALUE_DUPLICATED", "Select component option values must be unique")
		}
		values[v] = true
	}
	if maxV > len(opts) {
		return formError(at+".max_values", "SELECT_COMPONENT_MAX_VALUES_EXCEEDS_OPTIONS", fmt.Sprintf("max_values must be %d (the number of options) or fewer.", len(opts)))
	}
	return nil
}

// intValue reads the optional integer c[k] of the component at at.
func intValue(c map[string]any, k, at string) (int, bool, *apiError) {
	v, ok := c[k]
	if !ok || v == nil {
		return 0, false, nil
	}
	f, isNum := v.(float64)
	if !isNum || f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxInt32 {
		return 0, false, formError(at+"."+k, "NUMBER_TYPE_COERCE", fmt.Sprintf("Value %q is not int.", fmt.Sprint(v)))
	}
	return int(f), true, nil
}

// findStringSelect returns the enabled string select with customID among
// components, at any depth.
func findStringSelect(components []map[string]any, customID string) map[string]any {
	var found map[string]any
	walkComponents(components, func(c map[string]any) {
		if found == nil && c["type"] == float64(componentStringSelect) && c["custom_id"] == customID && c["disabled"] != true {
			found = c
		}
	})
	return found
}

// pickable refuses values the person cannot pick in sel: not among its
// options, repeated, or fewer than min_values or more than max_values.
func pickable(sel map[string]any, values []string) error {
	offered := map[string]bool{}
	opts, _ := sel["options"].([]any)
	for _, raw := range opts {
		o, _ := raw.(map[string]any)
		if v, ok := o["value"].(string); ok {
			offered[v] = true
		}
	}
	for i, v := range values {
		if !offered[v] {
			return fmt.Errorf("value %q is not an option: %w", v, ErrNoSelect)
		}
		if slices.Contains(values[:i], v) {
			return fmt.Errorf("value %q picked twice: %w", v, ErrNoSelect)
		}
	}
	minV, maxV := 1, 1
	if f, ok := sel["min_values"].(float64); ok {
		minV = int(f)
	}
	if f, ok := sel["max_values"].(float64); ok {
		maxV = int(f)
	}
	if len(values) < minV || len(values) > maxV {
		return fmt.Errorf("%d values, the select takes %d to %d: %w", len(values), minV, maxV, ErrNoSelect)
	}
	return nil
}

// Select has userID pick values in the string select with customID on
// the message messageID in channel: it dispatches the INTERACTION_CREATE
// Discord sends (a MESSAGE_COMPONENT interaction with data.component_type
// 3, data.custom_id and data.values, the full message, the member in a
// guild channel or the user in a DM, a token for the callback), as Click
// does, and returns the interaction's id. It fails with ErrNoSelect when
// the message, as it is now, has no enabled string select with customID
// (at any depth: in an action row, in a container's) or the values are
// not ones the person could pick; nothing is dispatched then.
func (s *Server) Select(channel, messageID, userID, customID string, values ...string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	ch, ok := s.channels[channel]
	if !ok {
		return "", fmt.Errorf("select %s in channel %s: unknown channel: %w", customID, channel, ErrNoSelect)
	}
	m, ok := s.messages[messageID]
	if !ok || m.ChannelID != channel {
		return "", fmt.Errorf("select %s on message %s: unknown message: %w", customID, messageID, ErrNoSelect)
	}
	sel := findStringSelect(m.Components, customID)
	if sel == nil {
		return "", fmt.Errorf("select %s on message %s: %w", customID, messageID, ErrNoSelect)
	}
	if err := pickable(sel, values); err != nil {
		return "", fmt.Errorf("select %s on message %s: %w", customID, messageID, err)
	}
	if userID == "" {
		return "", errors.New("fakediscord: select by no user")
	}
	picked := make([]any, len(values))
	for i, v := range values {
		picked[i] = v
	}
	data := map[string]any{"custom_id": customID, "component_type": componentStringSelect, "values": picked}
	if id, ok := sel["id"]; ok {
		data["id"] = id
	}
	id, err := s.componentInteractionLocked(ch, m, userID, data)
	if err != nil {
		return "", fmt.Errorf("select %s: %w", customID, err)
	}
	return id, nil
}
