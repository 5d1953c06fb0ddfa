package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/devledger/devledger/events"
	"github.com/devledger/devledger/testdata/sysfsgen"
)

// hostileIface is an interface name the kernel takes (no '/', ':' or
// white space, under 16 bytes): a pod that renamed its VF so, in its own
// network namespace, hands it back to the host under that name when the
// namespace goes without the CNI's DEL. On a terminal it sets the window's
// title and rings its bell.
const hostileIface = "\x1b]0;owned\x07"

// rawControls returns what in s a terminal would obey rather than show:
// control characters other than newline and tab (C0, DEL, C1), and bytes
// that are no UTF-8 (a terminal in an 8-bit mode reads 0x9b as CSI).
func rawControls(s string) []string {
	var found []string
	for i, r := range s {
		_, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			found = append(found, s[i:i+1])
		case r != '\n' && r != '\t' && unicode.IsControl(r):
			found = append(found, string(r))
		}
	}
	return found
}

// TestTablesEscapeControlCharacters: what the ledger holds of sysfs and
// of the PCI ID database (an interface name, a health reason naming it, a
// device name) reaches every table escaped, piped or on a terminal, so
// that dump, a device's story, replay and scan show a hostile name rather
// than play it to the operator's terminal.
func TestTablesEscapeControlCharacters(t *testing.T) {
	const vfio, dev = "intel.com/sriov_vfio", "0000:3b:02.1"
	l := pooledVF(vfio, dev)
	facts := events.DeviceFacts{Address: dev, Vendor: "8086", Device: "1889", Driver: "iavf",
		Interfaces: []string{hostileIface}, VendorName: "Intel\u009b2J", DeviceName: "VF\x1b[2J\r"}
	l.add(events.DeviceChanged{Device: facts, Changed: []string{"driver", "interfaces", "vendor_name", "device_name"}})
	l.add(events.DeviceHealthChanged{Address: dev, Reason: "link down on " + hostileIface + " \xff"})
	db := filepath.Join(t.TempDir(), "ledger.db")
	writeLedger(t, db, l.envs)

	r := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	if err := r.AddInterface("0000:3b:01.3", sysfsgen.Interface{Name: hostileIface}); err != nil {
		t.Fatal(err)
	}
	// A carrier no kernel writes: scan warns, naming the interface.
	carrier := filepath.Join(r.Sysfs, "class", "net", hostileIface, "carrier")
	if err := os.WriteFile(carrier, bytes.Repeat([]byte("1"), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	ids, err := os.ReadFile(samplePCIIDs)
	if err != nil {
		t.Fatal(err)
	}
	pciIDs := filepath.Join(t.TempDir(), "pci.ids")
	ids = bytes.Replace(ids, []byte("8086  Intel\n"), []byte("8086  Intel\x1b[8m\n"), 1)
	if err := os.WriteFile(pciIDs, ids, 0o644); err != nil {
		t.Fatal(err)
	}
	scan := scanArgs(r, scanConfigs[sysfsgen.ScenarioSRIOV], "--pci-ids", pciIDs)

	commands := []struct {
		name string
		args []string
		want string // shown escaped, piped
	}{
		{"dump", []string{"dump", "--db", db}, `link down on \x1b]0;owned\x07 \xff`},
		{"story", []string{"dump", "--db", db, "--device", dev}, `interfaces now \x1b]0;owned\x07`},
		{"replay", []string{"replay", "--db", db}, `\x1b]0;owned\x07`},
		{"scan", scan, `Intel\x1b[8m`},
		{"explain", append(scan, "--explain", "0000:3b:01.3"), `\x1b]0;owned\x07`},
	}
	for _, tc := range commands {
		t.Run(tc.name, func(t *testing.T) {
			code, piped, errOut := runCLI(t, tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !strings.Contains(piped, tc.want) {
				t.Errorf("piped, the output lacks %q:\n%s", tc.want, piped)
			}
			if found := rawControls(errOut); len(found) > 0 {
				t.Errorf("the warnings hold control characters %q:\n%s", found, errOut)
			}
			defer func(f func(io.Writer) int) { terminalWidth = f }(terminalWidth)
			terminalWidth = func(io.Writer) int { return 200 }
			_, term, _ := runCLI(t, tc.args...)
			for name, out := range map[string]string{"piped": piped, "on a terminal": term} {
				if found := rawControls(out); len(found) > 0 {
					t.Errorf("%s, the output holds control characters %q:\n%s", name, found, out)
				}
			}
		})
	}
}

// TestEscaperTakesCharactersSplitBetweenWrites: a character whose bytes
// come in two writes (a table's buffer fills mid-character) is shown as
// it is, or escaped, exactly as when it comes whole.
func TestEscaperTakesCharactersSplitBetweenWrites(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"a character split at the end", "eth0 … \u009b2J \x1b[0m \xff€ tail \xe2\x82", `eth0 … \u009b2J \x1b[0m \xff€ tail \xe2\x82`},
		{"the edges of C0 and C1, a lone byte at the end", "\x7f~ \u009f\u00a0 é\xc3", `\x7f~ \u009f` + "\u00a0 é" + `\xc3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var whole, bytewise bytes.Buffer
			e := newEscaper(&whole)
			e.Write([]byte(tc.text))
			e.Close()
			// One buffer for every write, as a bufio.Writer's.
			e = newEscaper(&bytewise)
			buf := make([]byte, 1)
			for i := range len(tc.text) {
				buf[0] = tc.text[i]
				e.Write(buf)
			}
			e.Close()
			if whole.String() != tc.want {
				t.Errorf("whole: %q, want %q", whole.String(), tc.want)
			}
			if bytewise.String() != tc.want {
				t.Errorf("a byte a write: %q, want %q", bytewise.String(), tc.want)
			}
		})
	}
}
