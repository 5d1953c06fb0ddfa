package storetest

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
)

func TestBareUpdaterPutGet(t *testing.T) {
	u := NewBareUpdater(t, t.TempDir())
	for i := range uint64(3) {
		if err := u.Put(binary.BigEndian.AppendUint64(nil, i), []byte{byte(i), 'x'}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := u.Get(binary.BigEndian.AppendUint64(nil, 2))
	if err != nil || !bytes.Equal(got, []byte{2, 'x'}) {
		t.Errorf("Get(2) = %q, %v; want \"\\x02x\"", got, err)
	}
	if got, err := u.Get([]byte("absent")); err != nil || got != nil {
		t.Errorf("Get(absent) = %q, %v; want nil", got, err)
	}
}

// Appends from many goroutines all land, each under a sequence of its own,
// fewer commits carrying them when they come together.
func TestBareGroupCommitsWhatIsQueued(t *testing.T) {
	g := NewBareGroup(t, t.TempDir())
	const writers, each = 8, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := g.Append([]byte{byte(w), byte(i)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for seq := range uint64(writers*each + 1) {
		v, err := g.Get(binary.BigEndian.AppendUint64(nil, seq+1))
		if err != nil {
			t.Fatal(err)
		}
		if seq == writers*each {
			if v != nil {
				t.Errorf("a value past the last sequence: %q", v)
			}
			break
		}
		if v == nil || seen[string(v)] {
			t.Fatalf("sequence %d holds %q (seen before: %v)", seq+1, v, seen[string(v)])
		}
		seen[string(v)] = true
	}
	if commits, appends := g.Batches(); appends != writers*each || commits < 1 || commits > appends {
		t.Errorf("%d commits carried %d appends, want %d appends in 1 to %[3]d commits", commits, appends, writers*each)
	}
}
