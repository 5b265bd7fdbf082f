package fakediscord

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf16"
)

// Message flags the fake knows (Message resource, message flags).
const (
	flagSuppressEmbeds        = 1 << 2
	flagSuppressNotifications = 1 << 12
	flagVoiceMessage          = 1 << 13
	flagComponentsV2          = 1 << 15
	// createFlags may be set when a message is created; EPHEMERAL only by
	// an interaction callback, which sets it itself.
	createFlags = flagSuppressEmbeds | flagSuppressNotifications | flagVoiceMessage | flagComponentsV2
	// editFlags may change in an edit: SUPPRESS_EMBEDS both ways,
	// IS_COMPONENTS_V2 only on.
	editFlags = flagSuppressEmbeds | flagComponentsV2
)

// Components V2 (Component reference): the types and the limits of a
// message flagged IS_COMPONENTS_V2.
const (
	componentSection      = 9
	componentTextDisplay  = 10
	componentThumbnail    = 11
	componentMediaGallery = 12
	componentFile         = 13
	componentSeparator    = 14
	componentContainer    = 17

	maxV2Components   = 40   // in a message, nested ones included
	maxV2Text         = 4000 // characters of text display content in all
	maxSectionTexts   = 3
	maxGalleryItems   = 10
	maxAccentColor    = 0xFFFFFF
	separatorSmall    = 1
	separatorLarge    = 2
	legacyWithV2Field = "MESSAGE_CANNOT_USE_LEGACY_FIELDS_WITH_COMPONENTS_V2"
)

// RefuseComponentsV2 makes the fake refuse, from now on, every new message
// flagged IS_COMPONENTS_V2 (posts and interaction replies) with the 400
// code 50035 Discord answers when it does not take the flag: the
// container is an unknown top-level component. Edits of messages that
// already are V2 are still accepted. RefuseComponentsV2(false) lifts it.
func (s *Server) RefuseComponentsV2(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	s.refuseV2 = on
}

// IsComponentsV2 reports whether the message carries the IS_COMPONENTS_V2
// flag (1<<15).
func (m Message) IsComponentsV2() bool { return m.Flags&flagComponentsV2 != 0 }

// TextDisplays returns the content of the message's text displays, at any
// depth, in order.
func (m Message) TextDisplays() []string {
	var out []string
	walkComponents(m.Components, func(c map[string]any) {
		if c["type"] == float64(componentTextDisplay) {
			s, _ := c["content"].(string)
			out = append(out, s)
		}
	})
	return out
}

// CustomIDs returns the custom_id of every button and select menu in the
// message, at any depth, in order.
func (m Message) CustomIDs() []string {
	var out []string
	walkComponents(m.Components, func(c map[string]any) {
		if id, ok := c["custom_id"].(string); ok {
			out = append(out, id)
		}
	})
	return out
}

// ComponentCount counts the message's components as Discord limits them:
// every one, nested ones included.
func (m Message) ComponentCount() int {
	n := 0
	walkComponents(m.Components, func(map[string]any) { n++ })
	return n
}

// walkComponents calls f on each component, parents before children, a
// section's accessory after its text displays.
func walkComponents(list []map[string]any, f func(map[string]any)) {
	var walk func(c map[string]any)
	walk = func(c map[string]any) {
		f(c)
		children, _ := c["components"].([]any)
		for _, raw := range children {
			if child, ok := raw.(map[string]any); ok {
				walk(child)
			}
		}
		if acc, ok := c["accessory"].(map[string]any); ok {
			walk(acc)
		}
	}
	for _, c := range list {
		walk(c)
	}
}

// messageFlags is the flags m has after body: on a new message those it
// may be created with; on an edit SUPPRESS_EMBEDS may change and
// IS_COMPONENTS_V2 may be set, never removed.
func messageFlags(m *Message, body map[string]any, isNew bool) (int, *apiError) {
	v, ok := body["flags"]
	if !ok || v == nil {
		return m.Flags, nil
	}
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || f < 0 || f > math.MaxInt32 {
		return 0, formError("flags", "NUMBER_TYPE_COERCE", fmt.Sprintf("Value %q is not int.", fmt.Sprint(v)))
	}
	n := int(f)
	if isNew {
		return n & createFlags, nil
	}
	if m.Flags&flagComponentsV2 != 0 && n&flagComponentsV2 == 0 {
		return 0, formError("flags", "MESSAGE_CANNOT_REMOVE_COMPONENTS_V2_FLAG", "The IS_COMPONENTS_V2 flag cannot be removed from a message.")
	}
	return m.Flags&^editFlags | n&editFlags, nil
}

// legacyField is the refusal of content, embeds, stickers or a poll in a
// message flagged IS_COMPONENTS_V2.
func legacyField(field string) *apiError {
	return formError(field, legacyWithV2Field, fmt.Sprintf("The '%s' field cannot be used when using MessageFlags.IS_COMPONENTS_V2", field))
}

// v2Check walks the components of a V2 message, counting them and their
// text.
type v2Check struct {
	count, text int
	customIDs   map[string]bool
	ids         map[int]bool // the optional numeric "id" of components
}

// Where a component stands, for the types allowed there.
const (
	atTop = iota
	inContainer
	inSection
	asAccessory
)

// allowedAt is the component types that may stand where.
func allowedAt(where int) []int {
	switch where {
	case atTop:
		return []int{componentActionRow, componentSection, componentTextDisplay, componentMediaGallery, componentFile, componentSeparator, componentContainer}
	case inContainer:
		return []int{componentActionRow, componentSection, componentTextDisplay, componentMediaGallery, componentFile, componentSeparator}
	case inSection:
		return []int{componentTextDisplay}
	}
	return []int{componentButton, componentThumbnail} // asAccessory
}

// checkComponentsV2 checks the components of a message flagged
// IS_COMPONENTS_V2 as Discord does: known types where each may stand (at
// the top action rows, sections, text displays, media galleries, files,
// separators and containers; in a container the same but containers; in a
// section text displays, with a button or thumbnail beside them),
// containers and sections not empty, text displays with content, action
// rows and buttons as checkComponents holds them (1 to 5 buttons, a
// custom_id of 1 to 100 characters, unique), at most 40 components
// counted with every nested one, and at most 4,000 characters of text
// display content in all.
func checkComponentsV2(list []any) *apiError {
	c := &v2Check{customIDs: map[string]bool{}, ids: map[int]bool{}}
	for i, raw := range list {
		if err := c.component(raw, fmt.Sprintf("components.%d", i), atTop); err != nil {
			return err
		}
	}
	if c.count > maxV2Components {
		return formError("components", "COMPONENT_MAX_TOTAL_EXCEEDED", fmt.Sprintf("Must be %d or fewer components in total, nested ones included (got %d).", maxV2Components, c.count))
	}
	if c.text > maxV2Text {
		return formError("components", "COMPONENT_MAX_TEXT_LENGTH_EXCEEDED", fmt.Sprintf("The text displays must hold %d or fewer characters together (got %d).", maxV2Text, c.text))
	}
	return nil
}

// component checks one component at at, standing where, and the
// components it holds.
func (c *v2Check) component(raw any, at string, where int) *apiError {
	m, ok := raw.(map[string]any)
	if !ok {
		return formError(at, "MODEL_TYPE_CONVERT", "Only dictionaries may be used in a ModelType")
	}
	typ, _ := m["type"].(float64)
	allowed := allowedAt(where)
	known := false
	for _, t := range allowed {
		known = known || typ == float64(t)
	}
	if !known {
		names := make([]string, len(allowed))
		for i, t := range allowed {
			names[i] = fmt.Sprint(t)
		}
		return formError(at+".type", "UNION_TYPE_CHOICES", fmt.Sprintf("Value of field \"type\" must be one of (%s).", strings.Join(names, ", ")))
	}
	if err := c.id(m, at); err != nil {
		return err
	}
	c.count++
	switch int(typ) {
	case componentActionRow:
		return c.actionRow(m, at)
	case componentButton: // a section's accessory
		if err := checkButton(m, at); err != nil {
			return err
		}
		c.text += textLen(m["label"])
		return uniqueCustomID(m, at, c.customIDs)
	case componentTextDisplay:
		content, ok := m["content"].(string)
		if !ok || content == "" {
			return formError(at+".content", "BASE_TYPE_REQUIRED", "This field is required")
		}
		c.text += textLen(content)
	case componentSeparator:
		return checkSeparator(m, at)
	case componentContainer:
		return c.container(m, at)
	case componentSection:
		return c.section(m, at)
	case componentThumbnail:
		return mediaURL(m["media"], at+".media")
	case componentMediaGallery:
		return checkMediaGallery(m, at)
	case componentFile:
		return mediaURL(m["file"], at+".file")
	}
	return nil
}

// id checks a component's optional numeric id: a positive int32, unique
// in the message.
func (c *v2Check) id(m map[string]any, at string) *apiError {
	v, ok := m["id"]
	if !ok || v == nil {
		return nil
	}
	id, ok := v.(float64)
	if !ok || id != math.Trunc(id) || id < 1 || id > math.MaxInt32 {
		return formError(at+".id", "NUMBER_TYPE_COERCE", "Value is not a positive int32.")
	}
	if c.ids[int(id)] {
		return formError(at+".id", "COMPONENT_ID_DUPLICATED", "Component id was already specified")
	}
	c.ids[int(id)] = true
	return nil
}

// actionRow checks a row as checkComponents does, counting its buttons
// and their labels.
func (c *v2Check) actionRow(m map[string]any, at string) *apiError {
	n, err := checkRow(m, at, c.customIDs)
	c.count += n
	if rows, ok := m["components"].([]any); ok {
		for _, b := range rows {
			if bm, ok := b.(map[string]any); ok {
				c.text += textLen(bm["label"])
			}
		}
	}
	return err
}

func checkSeparator(m map[string]any, at string) *apiError {
	if v, ok := m["divider"]; ok && v != nil {
		if _, ok := v.(bool); !ok {
			return formError(at+".divider", "BOOLEAN_TYPE_CONVERT", "Must be either true or false.")
		}
	}
	if v, ok := m["spacing"]; ok && v != nil {
		if v != float64(separatorSmall) && v != float64(separatorLarge) {
			return formError(at+".spacing", "BASE_TYPE_CHOICES", "Value must be one of {1, 2}.")
		}
	}
	return nil
}

// container checks a container's accent colour and spoiler, and the
// components in it (at least one).
func (c *v2Check) container(m map[string]any, at string) *apiError {
	if v, ok := m["accent_color"]; ok && v != nil {
		col, ok := v.(float64)
		if !ok || col != math.Trunc(col) || col < 0 || col > maxAccentColor {
			return formError(at+".accent_color", "NUMBER_TYPE_MAX", fmt.Sprintf("Must be an int between 0 and %d.", maxAccentColor))
		}
	}
	if v, ok := m["spoiler"]; ok && v != nil {
		if _, ok := v.(bool); !ok {
			return formError(at+".spoiler", "BOOLEAN_TYPE_CONVERT", "Must be either true or false.")
		}
	}
	children, _ := m["components"].([]any)
	if len(children) == 0 {
		return formError(at+".components", "BASE_TYPE_MIN_LENGTH", "Must be 1 or more in length.")
	}
	for i, raw := range children {
		if err := c.component(raw, fmt.Sprintf("%s.components.%d", at, i), inContainer); err != nil {
			return err
		}
	}
	return nil
}

// section checks a section's text displays (1 to maxSectionTexts) and its
// required accessory.
func (c *v2Check) section(m map[string]any, at string) *apiError {
	children, _ := m["components"].([]any)
	if len(children) < 1 || len(children) > maxSectionTexts {
		return formError(at+".components", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxSectionTexts))
	}
	for i, raw := range children {
		if err := c.component(raw, fmt.Sprintf("%s.components.%d", at, i), inSection); err != nil {
			return err
		}
	}
	acc, ok := m["accessory"]
	if !ok || acc == nil {
		return formError(at+".accessory", "BASE_TYPE_REQUIRED", "This field is required")
	}
	return c.component(acc, at+".accessory", asAccessory)
}

// checkMediaGallery checks a gallery's items: 1 to maxGalleryItems, each
// with a media url.
func checkMediaGallery(m map[string]any, at string) *apiError {
	items, _ := m["items"].([]any)
	if len(items) < 1 || len(items) > maxGalleryItems {
		return formError(at+".items", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be between 1 and %d in length.", maxGalleryItems))
	}
	for i, raw := range items {
		item, _ := raw.(map[string]any)
		if err := mediaURL(item["media"], fmt.Sprintf("%s.items.%d.media", at, i)); err != nil {
			return err
		}
	}
	return nil
}

// mediaURL checks an unfurled media item: it needs a url.
func mediaURL(v any, at string) *apiError {
	media, _ := v.(map[string]any)
	if u, _ := media["url"].(string); u == "" {
		return formError(at+".url", "BASE_TYPE_REQUIRED", "This field is required")
	}
	return nil
}

// textLen is how much of the 4,000-character budget a text takes:
// Discord counts "all text across all components" (text displays and
// button labels); the fake counts UTF-16 code units, as JavaScript's
// length does, the stricter reading for emoji and other characters
// outside the BMP.
func textLen(v any) int {
	s, _ := v.(string)
	return len(utf16.Encode([]rune(s)))
}
