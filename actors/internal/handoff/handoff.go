// Package handoff passes what an actor's Props were given at spawn (the
// ledger state replayed at start) to the actor's first incarnation only: a
// restarted actor rebuilds its state from the ledger as it is then.
package handoff

// First returns a function that yields v on its first call and the zero
// value on every later one. An actor's producer calls it once per
// incarnation; producers run on the actor's parent, one at a time.
func First[T any](v T) func() T {
	return func() T {
		first := v
		var zero T
		v = zero
		return first
	}
}
