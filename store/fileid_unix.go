//go:build unix

package store

import (
	"fmt"
	"os"
	"syscall"
)

// fileID is the file's device and inode: the same however the path
// names it (relative, through a link, from another working directory).
func fileID(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("dev=%d;ino=%d", uint64(st.Dev), uint64(st.Ino))
}
