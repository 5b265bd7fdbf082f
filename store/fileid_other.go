//go:build !unix

package store

import "os"

// fileID is empty where the system gives no device and inode: FileID
// falls back to the file's absolute, resolved path.
func fileID(os.FileInfo) string { return "" }
