package web

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
)

var _ chat.FileFetcher = (*Console)(nil)

// Files in (DESIGN §12), from the composer's attach button or a drop: a
// message carries its files in its JSON ({"name","type","data"}, data in
// base64). What the model may read (a text-like file or an image up to
// Options.FileBytes) travels with the message in the store as a data: URL,
// so it survives a restart and reaches the replica that runs the
// session; the rest is kept by name, type and size only, and described.
// At most maxFiles files a message, each name and type bounded, and the
// message as the store keeps it (its JSON, files' data included) at most
// maxStored bytes: it must stay one store write, and on etcd one request
// (--max-request-bytes, 1.5 MiB by default). Files whose bytes would take
// it over are kept by name and size and described.

const (
	maxFiles    = 10
	maxFileName = 255
	// maxFileType bounds a file's MIME type: RFC 6838 allows a type and a
	// subtype of 127 characters each.
	maxFileType = 255
	maxStored   = 1 << 20
	// dropped names a file whose bytes the console did not keep
	// (FetchFile says why).
	dropped = "console:over-the-message-limit"
)

// tooLarge is a message refused for its size (413): it says the limit.
type tooLarge string

func (e tooLarge) Error() string { return string(e) }

// postFile is a file of a posted message: its bytes in base64, or for a
// file the page knows the model is not given (over the limit) its size
// alone.
type postFile struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Data string `json:"data"` // base64
	Size int64  `json:"size"` // when Data is left out
}

// FileInfo is a file as the page shows it under a message.
type FileInfo struct {
	Name string `json:"name"`
	Type string `json:"type,omitempty"`
	Size int64  `json:"size"`
}

// jsonLen is how many bytes v takes in the store's JSON.
func jsonLen(v any) int {
	raw, _ := json.Marshal(v)
	return len(raw)
}

// takeFiles checks a message's files and returns them for the agent and
// for the page, or the reason they are refused (a tooLarge for a size).
// base is the stored size of the message without its files: the files'
// bytes are kept, in order, while the message stays within maxStored.
func (c *Console) takeFiles(in []postFile, base int) ([]agent.File, []FileInfo, error) {
	if len(in) > maxFiles {
		return nil, nil, fmt.Errorf("a message takes at most %d files; this one has %d", maxFiles, len(in))
	}
	limit := c.opts.FileBytes
	if limit <= 0 {
		limit = chat.DefaultFileBytes
	}
	var files []agent.File
	var infos []FileInfo
	var keep []string // the data: URL each file may keep, "" for none
	size := base + len(`,"Files":[]`)
	for i, f := range in {
		name := strings.TrimSpace(agent.ShownName(f.Name))
		if name == "" || utf8.RuneCountInString(name) > maxFileName || !utf8.ValidString(name) {
			return nil, nil, fmt.Errorf("file %d: a file needs a name of 1 to %d characters", i+1, maxFileName)
		}
		typ := strings.TrimSpace(agent.ShownName(f.Type))
		if n := utf8.RuneCountInString(typ); n > maxFileType {
			return nil, nil, tooLarge(fmt.Sprintf("file %s: its type is %d characters long; the limit is %d", name, n, maxFileType))
		}
		raw, err := base64.StdEncoding.DecodeString(f.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("file %s: its data is not base64: %v", name, err)
		}
		file := agent.File{Name: name, Type: typ, Size: int64(len(raw))}
		if f.Data == "" && f.Size > 0 {
			file.Size = f.Size // described by its size; no bytes to keep
		}
		url := ""
		if f.Data != "" && (chat.TextLike(typ, name) || strings.HasPrefix(typ, "image/")) && file.Size <= limit {
			url = "data:" + typ + ";base64," + f.Data
			file.URL = dropped // until it is known to fit
		}
		size += jsonLen(file) + 1
		files = append(files, file)
		keep = append(keep, url)
		infos = append(infos, FileInfo{Name: name, Type: typ, Size: file.Size})
	}
	if size > maxStored {
		return nil, nil, tooLarge(fmt.Sprintf("the message is %d KiB as the bot stores it, without its files' contents; the limit is %d KiB", size>>10, maxStored>>10))
	}
	for i, url := range keep {
		if url == "" {
			continue
		}
		if more := jsonLen(url) - jsonLen(dropped); size+more <= maxStored {
			files[i].URL = url
			size += more
		}
	}
	return files, infos, nil
}

// FetchFile implements chat.FileFetcher: a console file's bytes are in
// its data: URL; nothing else is fetched.
func (c *Console) FetchFile(_ context.Context, _ string, f agent.File, max int64) ([]byte, error) {
	if f.URL == dropped {
		return nil, &chat.FileError{Reason: fmt.Sprintf("the console keeps a message with its files up to %d KiB, and this one's files came to more", maxStored>>10)}
	}
	rest, ok := strings.CutPrefix(f.URL, "data:")
	_, data, ok2 := strings.Cut(rest, ";base64,")
	if !ok || !ok2 {
		return nil, &chat.FileError{Reason: "the console serves only the files sent with its messages"}
	}
	raw, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, fmt.Errorf("web: decode a file: %w", err)
	}
	if int64(len(raw)) > max+1 {
		raw = raw[:max+1]
	}
	return raw, nil
}

// reFileName reads the file names out of a file entry (agent.quoteFiles).
var reFileName = regexp.MustCompile(`<file name="([^"]*)" type="([^"]*)" size="(\d+)"`)

// filesOf lists the files a file entry of the history quotes.
func filesOf(content string) []FileInfo {
	var out []FileInfo
	for _, m := range reFileName.FindAllStringSubmatch(content, -1) {
		var size int64
		fmt.Sscan(m[3], &size)
		out = append(out, FileInfo{Name: agent.ShownName(unescape(m[1])), Type: agent.ShownName(unescape(m[2])), Size: size})
	}
	return out
}

var unescaper = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&amp;", "&")

func unescape(s string) string { return unescaper.Replace(s) }
