package fakeslack

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Limits Slack enforces on a message (docs.slack.dev, Block Kit reference
// and chat.postMessage).
const (
	maxMessageText   = 40000 // top-level text, else msg_too_long
	maxBlocks        = 50
	maxBlockID       = 255
	maxSectionText   = 3000
	maxSectionFields = 10
	maxFieldText     = 2000
	maxHeaderText    = 150
	maxContextElems  = 10
	maxActionsElems  = 25
	maxButtonText    = 75
	maxActionID      = 255
	maxButtonValue   = 2000
	maxButtonURL     = 3000
	maxButtonA11y    = 75 // accessibility_label
	maxConfirmTitle  = 100
	maxConfirmText   = 300
	maxConfirmButton = 30 // confirm and deny
	maxAltText       = 2000
	maxImageTitle    = 2000
	maxInputLabel    = 2000
	maxInputHint     = 2000
	maxMarkdownTotal = 12000 // all markdown blocks of a message together
)

// Limits of the menus a plan row carries and of the option objects in
// them (docs.slack.dev/reference/block-kit/block-elements/overflow-menu-element:
// "An array of up to five option objects"; api.slack.com's
// block-elements#overflow: "Maximum number of options is 5, minimum is
// 2"; .../block-elements/select-menu-element: static_select "Maximum
// number of options is 100", placeholder "Maximum length for the text in
// this field is 150 characters";
// .../composition-objects/option-object: text and description 75, value
// 150, url 3000 and only in an overflow menu).
const (
	minOverflowOptions = 2
	maxOverflowOptions = 5
	maxSelectOptions   = 100 // options, or option_groups
	maxOptionText      = 75
	maxOptionValue     = 150
	maxOptionDesc      = 75
	maxOptionURL       = 3000
	maxGroupLabel      = 75
	maxPlaceholder     = 150
	// plain_text_input (.../block-elements/plain-text-input-element):
	// min_length 0 to 3000, max_length 1 to 3000.
	maxTextInputLength = 3000
)

// blockTypes are the block types a message may carry, each with the
// check of its own fields, which returns why Slack would refuse them
// ("" if it would not; nil: a divider has none). plan and task_card are
// Slack's native agent blocks, which a workspace may refuse
// (Server.RejectNativePlan).
var blockTypes = map[string]func(b map[string]any) string{
	"section":   checkSection,
	"header":    func(b map[string]any) string { return checkTextObject(b["text"], "text", maxHeaderText, true) },
	"context":   checkContext,
	"divider":   nil,
	"actions":   checkActions,
	"rich_text": func(b map[string]any) string { return checkRichText(b, "rich_text") },
	"image":     func(b map[string]any) string { return checkImage(b, "image") },
	"input":     checkInput,
	"file":      checkFile,
	"video":     checkVideo,
	"markdown":  checkMarkdown,
	"plan":      checkPlan,
	"task_card": checkTaskCard,
}

// actionsElements are the interactive elements an actions block may hold.
var actionsElements = map[string]bool{
	"button": true, "checkboxes": true, "datepicker": true, "datetimepicker": true, "overflow": true,
	"radio_buttons": true, "timepicker": true, "workflow_button": true, "rich_text_input": true,
	"static_select": true, "external_select": true, "users_select": true, "conversations_select": true, "channels_select": true,
	"multi_static_select": true, "multi_external_select": true, "multi_users_select": true,
	"multi_conversations_select": true, "multi_channels_select": true,
}

var taskStatuses = map[string]bool{"pending": true, "in_progress": true, "complete": true, "error": true}

// richTextElements are the elements a rich_text object holds, and
// richTextSectionElements what a rich_text_section holds.
var (
	richTextElements        = map[string]bool{"rich_text_section": true, "rich_text_list": true, "rich_text_preformatted": true, "rich_text_quote": true}
	richTextSectionElements = map[string]bool{"text": true, "link": true, "emoji": true, "user": true, "usergroup": true, "channel": true,
		"broadcast": true, "date": true, "color": true, "team": true}
)

// checkText answers the error code and detail for a message's top-level
// text and blocks as chat.postMessage and chat.update take them, "" when
// Slack would accept them.
func checkText(text string, hasText bool, blocks string, hasBlocks, rejectNative bool) (code, detail string) {
	if n := utf8.RuneCountInString(text); n > maxMessageText {
		return "msg_too_long", fmt.Sprintf("text is %d characters, limit %d", n, maxMessageText)
	}
	if !hasBlocks {
		if !hasText || text == "" {
			return "no_text", "neither text nor blocks"
		}
		return "", ""
	}
	var list []any
	if err := json.Unmarshal([]byte(blocks), &list); err != nil {
		return "invalid_blocks_format", "blocks is not a JSON array: " + err.Error()
	}
	if len(list) == 0 && text == "" {
		return "no_text", "no text and an empty blocks array"
	}
	if d := checkBlocks(list, rejectNative); d != "" {
		return "invalid_blocks", d
	}
	return "", ""
}

// accessoryElements are the elements a section's accessory may be
// (docs.slack.dev/reference/block-kit/blocks/section-block: "Can be any
// one of the compatible element objects").
var accessoryElements = map[string]bool{
	"button": true, "checkboxes": true, "datepicker": true, "image": true, "overflow": true, "radio_buttons": true,
	"timepicker": true, "workflow_button": true,
	"static_select": true, "external_select": true, "users_select": true, "conversations_select": true, "channels_select": true,
	"multi_static_select": true, "multi_external_select": true, "multi_users_select": true,
	"multi_conversations_select": true, "multi_channels_select": true,
}

// inputElements are the elements an input block may hold
// (docs.slack.dev/reference/block-kit/blocks/input-block).
var inputElements = map[string]bool{
	"plain_text_input": true, "checkboxes": true, "datepicker": true, "datetimepicker": true, "email_text_input": true,
	"file_input": true, "number_input": true, "radio_buttons": true, "rich_text_input": true, "timepicker": true, "url_text_input": true,
	"static_select": true, "external_select": true, "users_select": true, "conversations_select": true, "channels_select": true,
	"multi_static_select": true, "multi_external_select": true, "multi_users_select": true,
	"multi_conversations_select": true, "multi_channels_select": true,
}

// checkBlocks returns why Slack would refuse a message's blocks, "" if it
// would not.
func checkBlocks(list []any, rejectNative bool) string {
	return checkBlockList(list, rejectNative, maxBlocks, nil)
}

// checkBlockList returns why Slack would refuse blocks: more than limit,
// or a type outside only (nil: any block type a message takes).
func checkBlockList(list []any, rejectNative bool, limit int, only map[string]bool) string {
	if len(list) > limit {
		return fmt.Sprintf("%d blocks, limit %d", len(list), limit)
	}
	ids := map[string]bool{}
	markdown := 0
	for i, raw := range list {
		b, ok := raw.(map[string]any)
		if !ok {
			return fmt.Sprintf("block %d is not an object", i)
		}
		typ, _ := b["type"].(string)
		check, known := blockTypes[typ]
		if !known {
			return fmt.Sprintf("block %d: unknown block type %q", i, typ)
		}
		if only != nil && !only[typ] {
			return fmt.Sprintf("block %d: block type %q is not allowed here", i, typ)
		}
		if rejectNative && (typ == "plan" || typ == "task_card") {
			return fmt.Sprintf("block %d: block type %q is not enabled for this workspace", i, typ)
		}
		if id, ok := b["block_id"].(string); ok {
			if n := utf8.RuneCountInString(id); n > maxBlockID || n == 0 {
				return fmt.Sprintf("block %d: block_id of %d characters, limit %d", i, n, maxBlockID)
			}
			if ids[id] {
				return fmt.Sprintf("block %d: duplicate block_id %q", i, id)
			}
			ids[id] = true
		}
		if typ == "markdown" {
			t, _ := b["text"].(string)
			markdown += utf8.RuneCountInString(t)
		}
		if check == nil {
			continue
		}
		if d := check(b); d != "" {
			return fmt.Sprintf("block %d (%s): %s", i, typ, d)
		}
	}
	if markdown > maxMarkdownTotal {
		return fmt.Sprintf("markdown blocks total %d characters, limit %d", markdown, maxMarkdownTotal)
	}
	return ""
}

// checkSection: text or fields, or both, and an optional accessory.
func checkSection(b map[string]any) string {
	text, hasText := b["text"]
	fields, hasFields := b["fields"]
	if !hasText && !hasFields {
		return "needs text or fields"
	}
	if hasText {
		if d := checkTextObject(text, "text", maxSectionText, false); d != "" {
			return d
		}
	}
	if hasFields {
		list, ok := fields.([]any)
		if !ok || len(list) == 0 {
			return "fields must be a non-empty array"
		}
		if len(list) > maxSectionFields {
			return fmt.Sprintf("%d fields, limit %d", len(list), maxSectionFields)
		}
		for j, f := range list {
			if d := checkTextObject(f, fmt.Sprintf("fields[%d]", j), maxFieldText, false); d != "" {
				return d
			}
		}
	}
	if acc, ok := b["accessory"]; ok {
		if d := checkElement(acc, "accessory"); d != "" {
			return d
		}
		if typ, _ := acc.(map[string]any)["type"].(string); !accessoryElements[typ] {
			return fmt.Sprintf("accessory: element type %q is not allowed as a section's accessory", typ)
		}
	}
	return ""
}

// checkContext: up to maxContextElems images and text objects.
func checkContext(b map[string]any) string {
	list, ok := b["elements"].([]any)
	if !ok || len(list) == 0 {
		return "elements must be a non-empty array"
	}
	if len(list) > maxContextElems {
		return fmt.Sprintf("%d elements, limit %d", len(list), maxContextElems)
	}
	for j, e := range list {
		name := fmt.Sprintf("elements[%d]", j)
		if m, ok := e.(map[string]any); ok && m["type"] == "image" {
			if d := checkImage(m, name); d != "" {
				return d
			}
			continue
		}
		if d := checkTextObject(e, name, maxSectionText, false); d != "" {
			return d
		}
	}
	return ""
}

// checkActions: up to maxActionsElems interactive elements, each action_id
// once.
func checkActions(b map[string]any) string {
	list, ok := b["elements"].([]any)
	if !ok || len(list) == 0 {
		return "elements must be a non-empty array"
	}
	if len(list) > maxActionsElems {
		return fmt.Sprintf("%d elements, limit %d", len(list), maxActionsElems)
	}
	// An action_id names one element of its block: a click reports
	// the block_id and the action_id.
	actionIDs := map[string]bool{}
	for j, e := range list {
		name := fmt.Sprintf("elements[%d]", j)
		if d := checkElement(e, name); d != "" {
			return d
		}
		m := e.(map[string]any)
		if typ, _ := m["type"].(string); !actionsElements[typ] {
			return fmt.Sprintf("%s: element type %q is not allowed in an actions block", name, typ)
		}
		if id, ok := m["action_id"].(string); ok {
			if actionIDs[id] {
				return fmt.Sprintf("%s: duplicate action_id %q", name, id)
			}
			actionIDs[id] = true
		}
	}
	return ""
}

func checkMarkdown(b map[string]any) string {
	if t, _ := b["text"].(string); t == "" {
		return "text is required"
	}
	return ""
}

// checkInput: a plain_text label of up to 2000 characters, an optional
// hint as long, optional a boolean, and one element an input block takes.
func checkInput(b map[string]any) string {
	if d := checkTextObject(b["label"], "label", maxInputLabel, true); d != "" {
		return d
	}
	if h, ok := b["hint"]; ok {
		if d := checkTextObject(h, "hint", maxInputHint, true); d != "" {
			return d
		}
	}
	if o, ok := b["optional"]; ok {
		if _, isBool := o.(bool); !isBool {
			return "optional must be a boolean"
		}
	}
	el, ok := b["element"].(map[string]any)
	if !ok {
		return "element is required"
	}
	if d := checkElement(el, "element"); d != "" {
		return d
	}
	if typ, _ := el["type"].(string); !inputElements[typ] {
		return fmt.Sprintf("element: element type %q is not allowed in an input block", typ)
	}
	return ""
}

func checkFile(b map[string]any) string {
	if id, _ := b["external_id"].(string); id == "" {
		return "external_id is required"
	}
	return ""
}

func checkVideo(b map[string]any) string {
	for _, k := range []string{"alt_text", "title", "video_url", "thumbnail_url"} {
		if _, ok := b[k]; !ok {
			return k + " is required"
		}
	}
	return ""
}

// checkPlan: a title, and tasks (if any) that are task cards.
func checkPlan(b map[string]any) string {
	if t, _ := b["title"].(string); t == "" {
		return "title is required"
	}
	if tasks, ok := b["tasks"]; ok {
		list, ok := tasks.([]any)
		if !ok {
			return "tasks must be an array"
		}
		for j, t := range list {
			m, ok := t.(map[string]any)
			if !ok || m["type"] != "task_card" {
				return fmt.Sprintf("tasks[%d] is not a task_card", j)
			}
			if d := checkTaskCard(m); d != "" {
				return fmt.Sprintf("tasks[%d]: %s", j, d)
			}
		}
	}
	return ""
}

func checkTaskCard(b map[string]any) string {
	if id, _ := b["task_id"].(string); id == "" {
		return "task_id is required"
	}
	if t, _ := b["title"].(string); t == "" {
		return "title is required"
	}
	if st, ok := b["status"]; ok {
		if s, _ := st.(string); !taskStatuses[s] {
			return fmt.Sprintf("unknown status %v", st)
		}
	}
	// details and output are each a single rich_text object.
	for _, k := range []string{"details", "output"} {
		if v, ok := b[k]; ok {
			if d := checkRichText(v, k); d != "" {
				return d
			}
		}
	}
	return ""
}

// checkRichText checks a rich_text object: rich text elements, each
// section holding typed inline elements, every text element non-empty.
func checkRichText(v any, name string) string {
	m, ok := v.(map[string]any)
	if !ok || m["type"] != "rich_text" {
		return name + " must be a rich_text object"
	}
	list, ok := m["elements"].([]any)
	if !ok || len(list) == 0 {
		return name + ".elements must be a non-empty array"
	}
	for i, e := range list {
		at := fmt.Sprintf("%s.elements[%d]", name, i)
		el, _ := e.(map[string]any)
		typ, _ := el["type"].(string)
		if !richTextElements[typ] {
			return fmt.Sprintf("%s: unknown rich text element %q", at, typ)
		}
		if typ != "rich_text_section" {
			continue
		}
		inline, ok := el["elements"].([]any)
		if !ok {
			return at + ".elements must be an array"
		}
		for j, x := range inline {
			xm, _ := x.(map[string]any)
			xt, _ := xm["type"].(string)
			if !richTextSectionElements[xt] {
				return fmt.Sprintf("%s.elements[%d]: unknown element %q", at, j, xt)
			}
			if t, _ := xm["text"].(string); xt == "text" && t == "" {
				return fmt.Sprintf("%s.elements[%d].text must be at least 1 character", at, j)
			}
		}
	}
	return ""
}

// checkTextObject checks a composition text object: plain_text or mrkdwn,
// 1 to max characters.
func checkTextObject(v any, name string, max int, plainOnly bool) string {
	m, ok := v.(map[string]any)
	if !ok {
		return name + " must be a text object"
	}
	typ, _ := m["type"].(string)
	switch {
	case typ == "plain_text":
	case typ == "mrkdwn" && !plainOnly:
	case plainOnly:
		return fmt.Sprintf("%s must be plain_text, not %q", name, typ)
	default:
		return fmt.Sprintf("%s has unknown text type %q", name, typ)
	}
	text, ok := m["text"].(string)
	if !ok || text == "" {
		return name + ".text must be at least 1 character"
	}
	if n := utf8.RuneCountInString(text); n > max {
		return fmt.Sprintf("%s.text is %d characters, limit %d", name, n, max)
	}
	return ""
}

func checkImage(m map[string]any, name string) string {
	_, url := m["image_url"].(string)
	_, file := m["slack_file"].(map[string]any)
	if !url && !file {
		return name + " needs image_url or slack_file"
	}
	alt, _ := m["alt_text"].(string)
	if alt == "" {
		return name + ".alt_text is required"
	}
	if n := utf8.RuneCountInString(alt); n > maxAltText {
		return fmt.Sprintf("%s.alt_text is %d characters, limit %d", name, n, maxAltText)
	}
	if t, ok := m["title"]; ok {
		return checkTextObject(t, name+".title", maxImageTitle, true)
	}
	return ""
}

// checkElement checks an interactive element's common limits, and a
// button's in full.
func checkElement(v any, name string) string {
	m, ok := v.(map[string]any)
	if !ok {
		return name + " must be an object"
	}
	typ, _ := m["type"].(string)
	if typ == "" {
		return name + ".type is required"
	}
	if c, ok := m["confirm"]; ok {
		if d := checkConfirm(c, name+".confirm"); d != "" {
			return d
		}
	}
	if id, ok := m["action_id"]; ok {
		s, isString := id.(string)
		if n := utf8.RuneCountInString(s); !isString || n > maxActionID || n == 0 {
			return fmt.Sprintf("%s.action_id is %d characters, want 1 to %d", name, n, maxActionID)
		}
	}
	switch typ {
	case "button":
		if d := checkTextObject(m["text"], name+".text", maxButtonText, true); d != "" {
			return d
		}
		if val, ok := m["value"].(string); ok {
			if n := utf8.RuneCountInString(val); n > maxButtonValue {
				return fmt.Sprintf("%s.value is %d characters, limit %d", name, n, maxButtonValue)
			}
		}
		if u, ok := m["url"].(string); ok {
			if n := utf8.RuneCountInString(u); n > maxButtonURL {
				return fmt.Sprintf("%s.url is %d characters, limit %d", name, n, maxButtonURL)
			}
		}
		if st, ok := m["style"]; ok && st != "primary" && st != "danger" {
			return fmt.Sprintf("%s.style %v is not primary or danger", name, st)
		}
		if l, ok := m["accessibility_label"].(string); ok {
			if n := utf8.RuneCountInString(l); n > maxButtonA11y {
				return fmt.Sprintf("%s.accessibility_label is %d characters, limit %d", name, n, maxButtonA11y)
			}
		}
	case "image":
		return checkImage(m, name)
	case "overflow":
		list, _ := m["options"].([]any)
		if n := len(list); n < minOverflowOptions || n > maxOverflowOptions {
			return fmt.Sprintf("%s.options: %d options, want %d to %d", name, n, minOverflowOptions, maxOverflowOptions)
		}
		for j, o := range list {
			if d := checkOption(o, fmt.Sprintf("%s.options[%d]", name, j), true); d != "" {
				return d
			}
		}
	case "static_select":
		return checkStaticSelect(m, name)
	case "plain_text_input":
		return checkTextInput(m, name)
	}
	return ""
}

// checkOption checks an option object of an overflow menu or a select:
// plain_text text, a value, an optional plain_text description, and a
// url only in an overflow menu.
func checkOption(v any, name string, overflow bool) string {
	m, ok := v.(map[string]any)
	if !ok {
		return name + " must be an option object"
	}
	if d := checkTextObject(m["text"], name+".text", maxOptionText, true); d != "" {
		return d
	}
	val, ok := m["value"].(string)
	if !ok || val == "" {
		return name + ".value is required"
	}
	if n := utf8.RuneCountInString(val); n > maxOptionValue {
		return fmt.Sprintf("%s.value is %d characters, limit %d", name, n, maxOptionValue)
	}
	if d, ok := m["description"]; ok {
		if r := checkTextObject(d, name+".description", maxOptionDesc, true); r != "" {
			return r
		}
	}
	if u, ok := m["url"]; ok {
		s, _ := u.(string)
		if !overflow {
			return name + ".url is only allowed in an overflow menu"
		}
		if n := utf8.RuneCountInString(s); n > maxOptionURL || n == 0 {
			return fmt.Sprintf("%s.url is %d characters, want 1 to %d", name, n, maxOptionURL)
		}
	}
	return ""
}

// checkStaticSelect: options or option_groups (not both), up to 100
// each, a plain_text placeholder of up to 150 characters, and an
// initial_option that is one of the options.
func checkStaticSelect(m map[string]any, name string) string {
	opts, hasOpts := m["options"]
	groups, hasGroups := m["option_groups"]
	if hasOpts == hasGroups {
		return name + " needs options or option_groups, not both"
	}
	var all []any
	if hasOpts {
		list, _ := opts.([]any)
		if len(list) == 0 || len(list) > maxSelectOptions {
			return fmt.Sprintf("%s.options: %d options, want 1 to %d", name, len(list), maxSelectOptions)
		}
		all = list
	} else {
		list, _ := groups.([]any)
		if len(list) == 0 || len(list) > maxSelectOptions {
			return fmt.Sprintf("%s.option_groups: %d groups, want 1 to %d", name, len(list), maxSelectOptions)
		}
		for j, g := range list {
			gm, _ := g.(map[string]any)
			at := fmt.Sprintf("%s.option_groups[%d]", name, j)
			if d := checkTextObject(gm["label"], at+".label", maxGroupLabel, true); d != "" {
				return d
			}
			inner, _ := gm["options"].([]any)
			if len(inner) == 0 || len(inner) > maxSelectOptions {
				return fmt.Sprintf("%s.options: %d options, want 1 to %d", at, len(inner), maxSelectOptions)
			}
			all = append(all, inner...)
		}
	}
	for j, o := range all {
		if d := checkOption(o, fmt.Sprintf("%s.options[%d]", name, j), false); d != "" {
			return d
		}
	}
	if p, ok := m["placeholder"]; ok {
		if d := checkTextObject(p, name+".placeholder", maxPlaceholder, true); d != "" {
			return d
		}
	}
	if init, ok := m["initial_option"]; ok {
		im, _ := init.(map[string]any)
		for _, o := range all {
			if om, _ := o.(map[string]any); om["value"] == im["value"] {
				return ""
			}
		}
		return name + ".initial_option must be one of the options"
	}
	return ""
}

// checkTextInput checks a plain_text_input: min_length 0 to 3000,
// max_length 1 to 3000 and not below min_length, a plain_text
// placeholder of up to 150 characters.
func checkTextInput(m map[string]any, name string) string {
	minLen, hasMin, ok := intField(m, "min_length")
	if !ok || hasMin && (minLen < 0 || minLen > maxTextInputLength) {
		return fmt.Sprintf("%s.min_length must be an integer from 0 to %d", name, maxTextInputLength)
	}
	maxLen, hasMax, ok := intField(m, "max_length")
	if !ok || hasMax && (maxLen < 1 || maxLen > maxTextInputLength) {
		return fmt.Sprintf("%s.max_length must be an integer from 1 to %d", name, maxTextInputLength)
	}
	if hasMin && hasMax && minLen > maxLen {
		return fmt.Sprintf("%s.min_length %d is more than max_length %d", name, minLen, maxLen)
	}
	if p, ok := m["placeholder"]; ok {
		if d := checkTextObject(p, name+".placeholder", maxPlaceholder, true); d != "" {
			return d
		}
	}
	if v, ok := m["initial_value"]; ok {
		if _, isString := v.(string); !isString {
			return name + ".initial_value must be a string"
		}
	}
	if v, ok := m["multiline"]; ok {
		if _, isBool := v.(bool); !isBool {
			return name + ".multiline must be a boolean"
		}
	}
	return ""
}

// intField reads the integer m[k]: present says whether it is there, ok
// whether it is an integer if it is.
func intField(m map[string]any, k string) (n int, present, ok bool) {
	v, present := m[k]
	if !present {
		return 0, false, true
	}
	f, isNum := v.(float64)
	if !isNum || f != float64(int(f)) {
		return 0, true, false
	}
	return int(f), true, true
}

// checkConfirm checks a confirmation dialog object: title, text, confirm
// and deny are required, style is primary or danger.
func checkConfirm(v any, name string) string {
	m, ok := v.(map[string]any)
	if !ok {
		return name + " must be a confirmation dialog object"
	}
	if d := checkTextObject(m["title"], name+".title", maxConfirmTitle, true); d != "" {
		return d
	}
	if d := checkTextObject(m["text"], name+".text", maxConfirmText, false); d != "" {
		return d
	}
	if d := checkTextObject(m["confirm"], name+".confirm", maxConfirmButton, true); d != "" {
		return d
	}
	if d := checkTextObject(m["deny"], name+".deny", maxConfirmButton, true); d != "" {
		return d
	}
	if st, ok := m["style"]; ok && st != "primary" && st != "danger" {
		return fmt.Sprintf("%s.style %v is not primary or danger", name, st)
	}
	return ""
}
