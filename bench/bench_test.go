package bench

import "testing"

// BenchmarkCases runs every case for every system. For numbers to quote,
// use cmd/report, which interleaves the systems round by round.
func BenchmarkCases(b *testing.B) {
	for _, c := range Cases {
		b.Run(c.Name, func(b *testing.B) {
			env := c.Setup()
			defer env.Stop()
			for _, s := range Systems {
				b.Run(s.Name, Loop(env.Op, s.New(env.Base, DefaultParams)))
			}
		})
	}
}
