//go:build race

package sim

// raceOn: the race detector slows each run several times; TestSim runs fewer seeds by default.
const raceOn = true
