package node_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/devledger/devledger/actors/node"
)

// A reload that drops a pool before the node has placed any device (a
// restarted node waits for its scanner) records the pool's members, as
// the ledger lists them, leaving it: else `dump --device` shows them
// joining the pool and never leaving it.
func TestAPoolDroppedBeforeThePlacementRecordsItsMembersLeaving(t *testing.T) {
	both := `{"resourceList": [` + vfioSpec + `, ` + netSpec + `]}`
	netOnly := `{"resourceList": [` + netSpec + `]}`
	n := startDeferNode(t, both)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.kubelet.WaitRegistered(ctx, vfioPool); err != nil {
		t.Fatal(err)
	}
	if st := n.waitPool(ctx, t, vfioPool); st.Members == 0 {
		t.Fatalf("%s has no members", vfioPool)
	}
	if err := os.WriteFile(n.config, []byte(netOnly), 0o644); err != nil {
		t.Fatal(err)
	}
	// The restarted node takes the reload before its new scanner's scan.
	n.d.Send(&node.Crash{Reason: "test"})
	if res, err := n.d.Reload(ctx, "drop"); err != nil || !res.Applied {
		t.Fatalf("reload = %+v, %v", res, err)
	}

	ms := n.memberships(t, vfioPool)
	var listed []string
	for _, m := range ms {
		listed = slices.DeleteFunc(listed, func(a string) bool { return slices.Contains(m.Removed, a) })
		listed = append(listed, m.Added...)
	}
	if len(listed) > 0 {
		t.Errorf("the ledger lists %v in the dropped %s; its records: %+v", listed, vfioPool, ms)
	}
}
