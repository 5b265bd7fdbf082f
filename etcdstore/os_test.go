package etcdstore

import "os"

func mkdirTemp() (string, error) { return os.MkdirTemp("", "etcdstore-test-") }
func removeAll(dir string)       { os.RemoveAll(dir) }
func exit(code int)              { os.Exit(code) }
