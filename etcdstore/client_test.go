package etcdstore

import "testing"

func TestBefore35(t *testing.T) {
	for v, want := range map[string]bool{"3.4.23": true, "3.3.0": true, "2.3.8": true, "3.5.0": false, "3.6.4": false, "3.7.3": false, "4.0.0": false, "": false, "x.y": false} {
		if got := Before35(v); got != want {
			t.Errorf("Before35(%q) = %t, want %t", v, got, want)
		}
	}
}
