package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	goldenfile "github.com/devledger/devledger/internal/golden"
	"github.com/devledger/devledger/store"
	"github.com/devledger/devledger/testdata/sysfsgen"
	bolt "go.etcd.io/bbolt"
)

// damagedDir holds ledgers damaged the ways disks and people damage files,
// each made from damagedSource by damagedCases (-update writes them again).
var damagedDir = filepath.Join("..", "..", "testdata", "ledger", "damaged")

// damagedSource is the sound ledger the corpus is made from: the one the
// invented story (sampleStory) wrote when it was the bundled sample, kept
// byte for byte, so that the damage lands where the tables of this test,
// the store's salvage test and the daemon's say. Not *.db: what the
// corpus's readers glob is damaged.
var damagedSource = filepath.Join(damagedDir, "source.ledger")

// damagedCase is one way to damage a ledger: make returns the damaged
// bytes of the sound file.
type damagedCase struct {
	name, what string
	make       func(t *testing.T, sound []byte, l ledgerLayout) []byte
}

// ledgerLayout is where things are in the sound file: its page size, the
// page of bbolt's freelist, of the bucket directory (the meta's root), and
// the file offsets of the records of a few sequences.
type ledgerLayout struct {
	pageSize, freelist, root int
	record                   map[uint64]int
	middle, last             uint64
}

func (l ledgerLayout) page(id int, b []byte) []byte {
	return b[id*l.pageSize : (id+1)*l.pageSize]
}

var damagedCases = []damagedCase{
	{"empty", "an empty file", func(t *testing.T, b []byte, l ledgerLayout) []byte { return nil }},
	{"text", "not a ledger: a text file", func(t *testing.T, b []byte, l ledgerLayout) []byte {
		return bytes.Repeat([]byte("not a ledger\n"), 100)
	}},
	{"zeroed", "every byte zero", func(t *testing.T, b []byte, l ledgerLayout) []byte { return make([]byte, len(b)) }},
	{"garbage", "random bytes, the sound file's length", func(t *testing.T, b []byte, l ledgerLayout) []byte {
		return randomBytes(1, len(b))
	}},
	{"truncated-8k", "cut to 8 KiB: the two meta pages", func(t *testing.T, b []byte, l ledgerLayout) []byte { return b[:8192] }},
	{"truncated-half", "cut to half its length", func(t *testing.T, b []byte, l ledgerLayout) []byte { return b[:len(b)/2] }},
	{"meta0-zeroed", "meta page 0 zeroed (a torn meta write)", func(t *testing.T, b []byte, l ledgerLayout) []byte {
		clear(l.page(0, b))
		return b
	}},
	{"meta1-zeroed", "meta page 1 zeroed (a torn meta write)", func(t *testing.T, b []byte, l ledgerLayout) []byte {
		clear(l.page(1, b))
		return b
	}},
	{"root-garbage", "random bytes over the bucket directory's page", func(t *testing.T, b []byte, l ledgerLayout) []byte {
		copy(l.page(l.root, b), randomBytes(2, l.pageSize))
		return b
	}},
	{"freelist-garbage", "random bytes over bbolt's freelist page", func(t *testing.T, b []byte, l ledgerLayout) []byte {
		copy(l.page(l.freelist, b), randomBytes(3, l.pageSize))
		return b
	}},
	{"events-page-garbage", "random bytes over the page that holds the middle event", func(t *testing.T, b []byte, l ledgerLayout) []byte {
		copy(l.page(l.record[l.middle]/l.pageSize, b), randomBytes(4, l.pageSize))
		return b
	}},
	{"last-events-page-garbage", "random bytes over the page that holds the newest event", func(t *testing.T, b []byte, l ledgerLayout) []byte {
		copy(l.page(l.record[l.last]/l.pageSize, b), randomBytes(5, l.pageSize))
		return b
	}},
	{"event-byte-flipped", "one byte of the middle event flipped (its checksum fails)", func(t *testing.T, b []byte, l ledgerLayout) []byte {
		b[l.record[l.middle]+12] ^= 0x20
		return b
	}},
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0xdead))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// layoutOf finds, in the sound file at path, what the cases damage.
func layoutOf(t *testing.T, path string, sound []byte) ledgerLayout {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l := ledgerLayout{pageSize: db.Info().PageSize, record: map[uint64]int{}}
	// The meta bbolt reads through is the one of the newer transaction;
	// it names the root bucket's page and the freelist's.
	const header, rootAt, freelistAt, txAt = 16, 16, 32, 48
	le := binary.LittleEndian
	meta := 0
	if le.Uint64(sound[l.pageSize+header+txAt:]) > le.Uint64(sound[header+txAt:]) {
		meta = 1
	}
	l.root = int(le.Uint64(sound[meta*l.pageSize+header+rootAt:]))
	l.freelist = int(le.Uint64(sound[meta*l.pageSize+header+freelistAt:]))

	log, err := store.Open(path, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	l.last = log.LastSeq()
	l.middle = l.last / 2
	if err := log.ReadRaw(0, func(seq uint64, rec []byte) error {
		if seq == l.middle || seq == l.last {
			off := bytes.Index(sound, rec)
			if off < 0 || bytes.Contains(sound[off+1:], rec) {
				return fmt.Errorf("record %d is not in the file once", seq)
			}
			l.record[seq] = off
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if l.freelist < 2 || l.root < 2 || len(l.record) != 2 {
		t.Fatalf("layout of %s: %+v", path, l)
	}
	return l
}

// TestDamagedLedgers runs every reading command, and ledger compact, over
// each damaged file: none crashes, each exits 1 (damage, named) or 2 (not
// a ledger), compact writes nothing, and
// what each says is pinned in testdata/damaged.golden, the table of
// damage against what every tool says.
func TestDamagedLedgers(t *testing.T) {
	if goldenfile.Updating() {
		sound, err := os.ReadFile(damagedSource)
		if err != nil {
			t.Fatal(err)
		}
		l := layoutOf(t, damagedSource, sound)
		if err := os.MkdirAll(damagedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, c := range damagedCases {
			if err := os.WriteFile(filepath.Join(damagedDir, c.name+".db"), c.make(t, slices.Clone(sound), l), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	roots, err := sysfsgen.BuildScenario(t.TempDir(), sysfsgen.ScenarioSRIOV)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	for _, c := range damagedCases {
		fmt.Fprintf(&table, "## %s: %s\n", c.name, c.what)
		src := filepath.Join(damagedDir, c.name+".db")
		// Tools open read-only, but a copy keeps the corpus safe from
		// any tool that would not.
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("%v (go test -run TestDamagedLedgers -update writes the corpus)", err)
		}
		db := filepath.Join(t.TempDir(), c.name+".db")
		if err := os.WriteFile(db, data, 0o600); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "compact.db")
		for _, args := range [][]string{
			{"dump", "--db", db},
			// The first passes of --pod and --iface read around damage too.
			{"dump", "--pod", "telco/dpdk-testpmd-7d9f", "--db", db},
			{"dump", "--iface", "ens1f0", "--db", db},
			{"dump", "--stats", "--db", db},
			{"dump", "--stats", "--by", "pod", "--db", db},
			{"replay", "--db", db},
			{"replay", "--verify", "--db", db},
			scanArgs(roots, scanConfigs["sriov"], "--db", db),
			{"ledger", "compact", "--db", db, "--out", out},
		} {
			code, stdout, stderr := runCLI(t, args...)
			cmd := strings.Join(args[:slices.Index(args, "--db")], " ")
			if args[0] == "scan" {
				cmd = "scan --db"
			}
			if code != exitFailure && code != exitUsage && code != 0 {
				t.Errorf("%s: %s: exit %d", c.name, cmd, code)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("%s: %s crashed:\n%s", c.name, cmd, stderr)
			}
			said := strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(stderr), db, "FILE"), out, "OUT")
			fmt.Fprintf(&table, "%-16s exit %d, %d lines out; %s\n", cmd, code, strings.Count(stdout, "\n"), said)
		}
		if data, err := os.ReadFile(db); err != nil || !bytes.Equal(data, mustRead(t, src)) {
			t.Errorf("%s: a reading tool changed the file", c.name)
		}
		if left, _ := os.ReadDir(filepath.Dir(out)); len(left) != 0 {
			t.Errorf("%s: ledger compact left %v", c.name, left)
		}
		table.WriteString("\n")
	}
	checkGolden(t, "damaged", table.String())
}

// TestDamagedLedgerPage: dump --format html of each damaged file shows
// what the plain dump shows of it: the page draws the events up to the
// last one the dump could read, says the ledger is damaged, and the
// damage is named after it with the dump's exit status. A file the dump
// cannot read at all makes no page.
func TestDamagedLedgerPage(t *testing.T) {
	for _, c := range damagedCases {
		t.Run(c.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), c.name+".db")
			if err := os.WriteFile(db, mustRead(t, filepath.Join(damagedDir, c.name+".db")), 0o600); err != nil {
				t.Fatal(err)
			}
			code, table, said := runCLI(t, "dump", "--db", db)
			_, jsonl, _ := runCLI(t, "dump", "--db", db, "--format", "jsonl")
			pageCode, page, pageSaid := runCLI(t, "dump", "--db", db, "--format", "html")
			if pageCode != code || pageSaid != said {
				t.Errorf("html: exit %d, %q; the dump: exit %d, %q", pageCode, pageSaid, code, said)
			}
			if table == "" {
				if page != "" {
					t.Errorf("a page of a ledger the dump could not read:\n%s", page)
				}
				return
			}
			checkPage(t, page)
			want := "no events"
			if seqs := jsonlSeqs(t, jsonl); len(seqs) > 0 {
				want = fmt.Sprintf("its last event read is #%d,", seqs[len(seqs)-1])
			}
			if !strings.Contains(page, want) {
				t.Errorf("the page does not say %q", want)
			}
			if code == exitFailure && !strings.Contains(page, "The ledger is damaged; this page draws what could be read: ") {
				t.Errorf("the page does not say the ledger is damaged")
			}
			if !strings.Contains(said, errReadDamaged.Error()) {
				return
			}
			// A page that ends before the last event still names damage
			// read past.
			code, page, said = runCLI(t, "dump", "--db", db, "--format", "html", "--until", "2026-11-24T09:00:00Z")
			if code != exitFailure || !strings.Contains(said, errReadDamaged.Error()) || !strings.Contains(page, "The ledger is damaged; ") {
				t.Errorf("--until: exit %d, %q; the page says it is damaged: %v", code, said, strings.Contains(page, "The ledger is damaged; "))
			}
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A page that ends at --until before a record that fails its checksum
// names the damage and exits as the table does: the table reads on.
func TestDamagedLedgerPageUntilBeforeTheDamage(t *testing.T) {
	for _, name := range []string{"event-byte-flipped", "events-page-garbage"} {
		t.Run(name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), name+".db")
			if err := os.WriteFile(db, mustRead(t, filepath.Join(damagedDir, name+".db")), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"dump", "--db", db, "--until", "2026-11-24T08:00:05Z"}
			code, _, said := runCLI(t, args...)
			pageCode, page, pageSaid := runCLI(t, append(args, "--format", "html")...)
			if code != exitFailure || pageCode != code || pageSaid != said || !strings.Contains(page, "The ledger is damaged; ") {
				t.Errorf("table: exit %d, %q\nhtml: exit %d, %q, page says damaged: %v", code, said, pageCode, pageSaid, strings.Contains(page, "The ledger is damaged; "))
			}
		})
	}
}

// A point past the last event read through a meta page fallen back to an
// older transaction may be among the events the damage hides: replay
// names the damage and exits 1, not 2 as if the point were a mistake.
func TestDamagedLedgerPointPastWhatCouldBeRead(t *testing.T) {
	db := filepath.Join(t.TempDir(), "meta1-zeroed.db")
	if err := os.WriteFile(db, mustRead(t, filepath.Join(damagedDir, "meta1-zeroed.db")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"replay", "--until-seq", "10"},
		{"replay", "--diff", "#1..#10"},
		{"replay", "--diff", "#1..#10", "--format", "json"},
	} {
		code, stdout, stderr := runCLI(t, append(args, "--db", db)...)
		if code != exitFailure || !strings.Contains(stderr, "meta page 1 is damaged") || !strings.Contains(stderr, "what could be read ends at #0") {
			t.Errorf("%s: exit %d, %q; want exit 1 naming the damage", strings.Join(args, " "), code, stderr)
		}
		if stdout != "" {
			t.Errorf("%s: printed %q", strings.Join(args, " "), stdout)
		}
	}
}

// TestScanOfADamagedLedger: scan --db of a ledger read through a damaged
// page shows what it could read, names the damage and fails, as dump
// does: a verdict drawn from part of the ledger is not taken for the
// whole.
func TestScanOfADamagedLedger(t *testing.T) {
	r := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	tried := 0
	for _, c := range damagedCases {
		db := filepath.Join(t.TempDir(), c.name+".db")
		if err := os.WriteFile(db, mustRead(t, filepath.Join(damagedDir, c.name+".db")), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, said := runCLI(t, "dump", "--db", db); !strings.Contains(said, errReadDamaged.Error()) {
			continue
		}
		tried++
		code, out, said := runCLI(t, scanArgs(r, scanConfigs[sysfsgen.ScenarioSRIOV], "--db", db)...)
		if code != exitFailure || !strings.Contains(said, errReadDamaged.Error()) || !strings.Contains(out, "0000:3b:01.0") {
			t.Errorf("%s: scan --db: exit %d, stderr %q, want exit %d naming the damage after the devices:\n%s", c.name, code, said, exitFailure, out)
		}
	}
	if tried == 0 {
		t.Fatal("no damaged ledger is read through a damaged page")
	}
}
