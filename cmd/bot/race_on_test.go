//go:build race

package main

// raceEnabled builds the end-to-end binary with the race detector when the
// tests themselves run with -race.
const raceEnabled = true
