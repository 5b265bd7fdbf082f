package config

import "strings"

// Lookup is os.Getenv over environ (os.Environ's KEY=value entries): the
// first entry of a name wins, as in the process environment. Load and
// Diagnose take it.
func Lookup(environ []string) func(string) string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, dup := m[k]; !dup {
				m[k] = v
			}
		}
	}
	return func(k string) string { return m[k] }
}
