//go:build race

package memstore

// raceEnabled lets slow, race-irrelevant tests (heap measurement) skip.
const raceEnabled = true
