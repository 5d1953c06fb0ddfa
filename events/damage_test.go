package events

import (
	"fmt"
	"slices"
	"testing"
)

// TestApplyLedger: an acknowledgement moves only recorded damage, keeps
// the last KeepAcknowledged problems, and what it moved stays known; l
// itself is never changed.
func TestApplyLedger(t *testing.T) {
	var l LedgerState
	var problems []string
	for i := range KeepAcknowledged + 1 {
		problems = append(problems, fmt.Sprint("problem ", i))
		l = ApplyLedger(l, LedgerDamaged{Problem: problems[i]})
	}
	l = ApplyLedger(l, DamageAcknowledged{Problems: append(slices.Clone(problems), "never recorded")})
	if len(l.Damage) != 0 || !slices.Equal(l.Acknowledged, problems[1:]) {
		t.Fatalf("after acknowledging every problem: damage %d, acknowledged %d from %q, want none and the last %d",
			len(l.Damage), len(l.Acknowledged), l.Acknowledged[0], KeepAcknowledged)
	}
	if l.Known("never recorded") {
		t.Error("acknowledging a problem never recorded made it known")
	}
	if last := problems[len(problems)-1]; !l.Known(last) {
		t.Errorf("acknowledged %q is not known", last)
	}

	base := ApplyLedger(LedgerState{}, LedgerDamaged{Problem: "a"})
	base.Damage = slices.Grow(base.Damage, 4)
	one := ApplyLedger(base, LedgerDamaged{Problem: "b"})
	ApplyLedger(base, LedgerDamaged{Problem: "c"})
	if !slices.Equal(one.Damage, []string{"a", "b"}) {
		t.Errorf("another result from the same state changed this one: %q", one.Damage)
	}
}
