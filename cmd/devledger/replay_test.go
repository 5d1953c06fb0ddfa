package main

import (
	"strings"
	"testing"
)

func TestReplayGolden(t *testing.T) {
	db := sampleCopy(t)
	cases := []struct {
		name string
		args []string
	}{
		{"replay_end", nil},
		{"replay_verify", []string{"--verify"}},
		{"replay_until_seq", []string{"--until-seq", "22"}},
		{"replay_until_time", []string{"--until-time", "2026-11-24T10:00:00Z"}},
		{"replay_json_until_time", []string{"--format", "json", "--until-time", "2026-11-24T09:30:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"replay", "--db", db}, tc.args...)...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			out = strings.ReplaceAll(out, db, "LEDGER")
			checkGolden(t, tc.name, out)
		})
	}
}

// TestReplayAnswersWhoHeldTheDevice is the ledger's promise: the state at a
// past time says which pod held a device then.
func TestReplayAnswersWhoHeldTheDevice(t *testing.T) {
	db := sampleCopy(t)
	_, during, _ := runCLI(t, "replay", "--db", db, "--until-time", "2026-11-24T10:00:00Z")
	if !strings.Contains(during, "telco/dpdk-testpmd-7d9f/testpmd") {
		t.Errorf("at 10:00 the VF was held by telco/dpdk-testpmd-7d9f:\n%s", during)
	}
	_, after, _ := runCLI(t, "replay", "--db", db, "--until-time", "2026-11-24T12:30:00Z")
	if strings.Contains(after, "dpdk-testpmd") {
		t.Errorf("at 12:30 the VF was released:\n%s", after)
	}
}
