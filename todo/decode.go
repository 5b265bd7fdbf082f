package todo

import (
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// decodeArguments decodes arguments, which json.Valid has accepted, into
// the values encoding/json gives an any, with numbers left as json.Number.
// It walks the tokens itself to reject, as argument errors, what
// encoding/json lets through silently: a key repeated in an object (it keeps
// the last) and a lone surrogate escape (it decodes one as U+FFFD). Numbers
// stay text, so 1e400 where an array belongs is a value of the wrong type
// for the schema to name, not a float64 overflow.
func decodeArguments(arguments string) (any, error) {
	d := &tokenWalk{src: arguments, dec: json.NewDecoder(strings.NewReader(arguments))}
	d.dec.UseNumber()
	v, err := d.value("")
	if err != nil {
		return nil, err
	}
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &Error{Code: CodeInvalidJSON, Message: "arguments must be exactly one JSON object, with nothing after it"}
	}
	return v, nil
}

// tokenWalk reads one JSON value token by token, keeping the raw text of
// each token for the checks encoding/json cannot make after decoding.
type tokenWalk struct {
	src string
	dec *json.Decoder
	off int64 // input offset after the last token read
}

// next returns the next token and the raw text of a string token: the span
// from the previous token's end holds only white space, ':' and ',' before
// the string's opening quote, and InputOffset is just past its closing one.
func (w *tokenWalk) next() (json.Token, string, error) {
	start := w.off
	tok, err := w.dec.Token()
	if err != nil {
		return nil, "", &Error{Code: CodeInvalidJSON, Message: err.Error()}
	}
	w.off = w.dec.InputOffset()
	if _, ok := tok.(string); !ok {
		return tok, "", nil
	}
	span := w.src[start:w.off]
	q := strings.IndexByte(span, '"')
	if q < 0 || len(span)-q < 2 || span[len(span)-1] != '"' {
		return nil, "", &Error{Code: CodeInvalidJSON, Message: "cannot locate a string token at offset " + strconv.FormatInt(start, 10)}
	}
	return tok, span[q:], nil
}

func (w *tokenWalk) value(path string) (any, error) {
	tok, raw, err := w.next()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return w.object(path)
		case '[':
			return w.array(path)
		}
		return nil, &Error{Code: CodeInvalidJSON, Message: "unexpected " + t.String() + " at " + where(path)}
	case string:
		if esc := loneSurrogate(raw); esc != "" {
			return nil, invalidf("%s: lone surrogate escape %s; expected a string of valid Unicode", where(path), esc)
		}
	}
	return tok, nil // a string, json.Number, bool or nil
}

func (w *tokenWalk) object(path string) (map[string]any, error) {
	obj := make(map[string]any)
	for w.dec.More() {
		tok, raw, err := w.next()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, &Error{Code: CodeInvalidJSON, Message: "expected an object key at " + where(path)}
		}
		if esc := loneSurrogate(raw); esc != "" {
			return nil, invalidf("%s: a key has a lone surrogate escape %s; expected a string of valid Unicode", where(path), esc)
		}
		if _, dup := obj[key]; dup {
			return nil, invalidf("%s: key %q repeated", where(path), key)
		}
		v, err := w.value(join(path, key))
		if err != nil {
			return nil, err
		}
		obj[key] = v
	}
	if _, _, err := w.next(); err != nil { // the closing '}'
		return nil, err
	}
	return obj, nil
}

func (w *tokenWalk) array(path string) ([]any, error) {
	arr := []any{}
	for w.dec.More() {
		v, err := w.value(path + "[" + itoa(len(arr)) + "]")
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
	}
	if _, _, err := w.next(); err != nil { // the closing ']'
		return nil, err
	}
	return arr, nil
}

// loneSurrogate returns the first \uXXXX escape in raw, the text of a valid
// JSON string token with its quotes, that is half of a UTF-16 surrogate pair
// without the other half: a high surrogate (D800-DBFF) not directly followed
// by a low surrogate escape (DC00-DFFF), or a low one not directly preceded
// by a high one. It returns "" if there is none. Hex digits may be of either
// case. Every escape is stepped over whole, so in \\ud800 the escaped
// backslash is followed by plain text, not by an escape.
func loneSurrogate(raw string) string {
	high := "" // an unpaired high surrogate escape just read
	for i := 0; i < len(raw); {
		if raw[i] != '\\' || i+1 == len(raw) {
			if high != "" {
				return high
			}
			i++
			continue
		}
		if raw[i+1] != 'u' { // \" \\ \/ \b \f \n \r \t
			if high != "" {
				return high
			}
			i += 2
			continue
		}
		if i+6 > len(raw) {
			break
		}
		esc := raw[i : i+6]
		i += 6
		u, _ := strconv.ParseUint(esc[2:], 16, 16)
		switch {
		case u >= 0xdc00 && u <= 0xdfff:
			if high == "" {
				return esc
			}
			high = ""
		case high != "":
			return high
		case u >= 0xd800 && u <= 0xdbff:
			high = esc
		}
	}
	return high
}
