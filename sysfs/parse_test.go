package sysfs

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

func TestParseHex(t *testing.T) {
	tests := []struct {
		in     string
		digits int
		want   string
		ok     bool
	}{
		{"0x8086\n", 4, "8086", true},
		{"0X15B3", 4, "15b3", true},
		{"15b3", 4, "15b3", true},
		{"  0x020000 \n", 6, "020000", true},
		{"0x02000", 6, "", false},
		{"0x80861", 4, "", false},
		{"0x", 4, "", false},
		{"", 4, "", false},
		{"0xzzzz", 4, "", false},
		{"0x80 86", 4, "", false},
		{"0x-123", 4, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			var out [8]byte
			got, ok := parseHex([]byte(tc.in), tc.digits, out[:])
			if ok != tc.ok || string(got) != tc.want {
				t.Errorf("parseHex(%q, %d) = %q, %v; want %q, %v", tc.in, tc.digits, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		in     string
		lo, hi int
		want   int
		ok     bool
	}{
		{"0\n", -1, 10, 0, true},
		{"-1\n", -1, 10, -1, true},
		{"-2", -1, 10, 0, false},
		{"256", 0, 0xffff, 256, true},
		{"65536", 0, 0xffff, 0, false},
		{"12345678901", 0, 1 << 30, 0, false},
		{"1.5", 0, 10, 0, false},
		{"-", -1, 10, 0, false},
		{"", 0, 10, 0, false},
		{" 7 ", 0, 10, 7, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := parseInt([]byte(tc.in), tc.lo, tc.hi)
			if ok != tc.ok || got != tc.want {
				t.Errorf("parseInt(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseLinkTypeAndCarrier(t *testing.T) {
	tests := []struct {
		in       string
		linkType string
		ok       bool
	}{
		{"1\n", "ether", true},
		{"32\n", "infiniband", true},
		{"772\n", "772", true},
		{"0", "0", true},
		{"-1", "", false},
		{"ether", "", false},
	}
	for _, tc := range tests {
		t.Run("type "+tc.in, func(t *testing.T) {
			got, ok := parseLinkType([]byte(tc.in))
			if got != tc.linkType || ok != tc.ok {
				t.Errorf("parseLinkType(%q) = %q, %v", tc.in, got, ok)
			}
		})
	}
	for in, want := range map[string]int{"1\n": 1, "0\n": 0, "2": -1, "": -1} {
		t.Run("carrier "+in, func(t *testing.T) {
			got, ok := parseCarrier([]byte(in))
			if !ok {
				got = -1
			}
			if got != want {
				t.Errorf("parseCarrier(%q) = %d, want %d", in, got, want)
			}
		})
	}
}

func TestParsePKey(t *testing.T) {
	tests := []struct {
		in        string
		key       string
		empty, ok bool
	}{
		{"0xffff\n", "0xffff", false, true},
		{"0x8001", "0x8001", false, true},
		{"0x7FFF", "0x7fff", false, true},
		{"0x1", "0x0001", false, true},
		{"0x0000\n", "", true, true},
		{"ffff", "", false, false},
		{"0x10000", "", false, false},
		{"0x", "", false, false},
		{"0xgg", "", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			key, empty, ok := parsePKey([]byte(tc.in))
			if key != tc.key || empty != tc.empty || ok != tc.ok {
				t.Errorf("parsePKey(%q) = %q, %v, %v", tc.in, key, empty, ok)
			}
		})
	}
}

func TestParseWordAndACPIIndex(t *testing.T) {
	for in, ok := range map[string]bool{
		"up\n": true, "lowerlayerdown": true, "UP": false, "": false, "up down": false, "a\x00": false,
	} {
		if _, got := parseWord([]byte(in)); got != ok {
			t.Errorf("parseWord(%q) ok = %v, want %v", in, got, ok)
		}
	}
	for in, ok := range map[string]bool{
		"1\n": true, "4294967295": true, "4294967296": true, "16777215": true,
		"18446744073709551615\n": true, "18446744073709551616": false, "99999999999999999999": false,
		"x1": false, "": false, "-1": false, "+1": false,
	} {
		if _, got := parseACPIIndex([]byte(in)); got != ok {
			t.Errorf("parseACPIIndex(%q) ok = %v, want %v", in, got, ok)
		}
	}
}

func TestAuxType(t *testing.T) {
	tests := []struct {
		name, typ string
		ok        bool
	}{
		{"mlx5_core.sf.2", "sf", true},
		{"mlx5_core.eth.0", "eth", true},
		{"ice.roce.12", "roce", true},
		{"drv.a.b.3", "a.b", true},
		{"0000:3b:00.0", "", false},
		{"mlx5_core.sf", "", false},
		{"mlx5_core..2", "", false},
		{".sf.2", "", false},
		{"mlx5_core.sf.x", "", false},
		{"mlx5_core.sf.", "", false},
		{"driver", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ, ok := auxType(tc.name)
			if typ != tc.typ || ok != tc.ok {
				t.Errorf("auxType(%q) = %q, %v; want %q, %v", tc.name, typ, ok, tc.typ, tc.ok)
			}
		})
	}
}

func TestNormalizeAddress(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"0000:3b:02.1", "0000:3b:02.1"},
		{"3B:02.1", "0000:3b:02.1"},
		{" 0000:AF:1F.7 ", "0000:af:1f.7"},
		{"10000:01:00.0", "10000:01:00.0"},
		{"0000:3b:20.0", ""},
		{"0000:3b:02.8", ""},
		{"0000:3b:02", ""},
		{"000:3b:02.1", ""},
		{"0000:3b:02.1/..", ""},
		{"../../etc/passwd", ""},
		{"", ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := NormalizeAddress(tc.in)
			if got != tc.want || (err != nil) != (tc.want == "") {
				t.Errorf("NormalizeAddress(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
			if err != nil && !errors.Is(err, ErrInvalidAddress) {
				t.Errorf("error %v does not wrap ErrInvalidAddress", err)
			}
		})
	}
}

func TestLinkBaseAndSortNumeric(t *testing.T) {
	for in, want := range map[string]string{
		"../../../bus/pci/drivers/ice": "ice", "ice": "ice", "../x/": "x", "..": "", "/": "", "": "",
	} {
		if got := linkBase(in); got != want {
			t.Errorf("linkBase(%q) = %q, want %q", in, got, want)
		}
	}
	names := []string{"10", "2", "x", "1", "b"}
	sortNumeric(names)
	if got := strings.Join(names, ","); got != "1,2,10,b,x" {
		t.Errorf("sortNumeric = %s", got)
	}
}

func TestClassName(t *testing.T) {
	tests := []struct {
		class, base, sub string
	}{
		{"020000", "Network controller", "Ethernet controller"},
		{"030200", "Display controller", "3D controller"},
		{"120000", "Processing accelerators", "Processing accelerators"},
		{"0b4000", "Processor", "Co-processor"},
		{"ee0000", "", ""},
		{"02", "", ""},
	}
	for _, tc := range tests {
		if base, sub := className(tc.class, nil); base != tc.base || sub != tc.sub {
			t.Errorf("className(%s) = %q, %q; want %q, %q", tc.class, base, sub, tc.base, tc.sub)
		}
	}
	db := &idDB{subclasses: map[string]string{"0200": "From the database"}}
	if _, sub := className("020000", db); sub != "From the database" {
		t.Errorf("database subclass name not preferred: %q", sub)
	}
}

// FuzzParseHex checks that the ID parser never panics and that what it
// accepts is exactly the requested number of lower-case hex digits.
func FuzzParseHex(f *testing.F) {
	for _, s := range []string{"0x8086\n", "0X15B3", "0x020000\n", "", "0x", "zz", "0x12345678901234567890", "\x00\xff"} {
		f.Add([]byte(s), 4)
		f.Add([]byte(s), 6)
	}
	f.Fuzz(func(t *testing.T, b []byte, digits int) {
		digits = digits & 7
		var out [8]byte
		got, ok := parseHex(b, digits, out[:])
		if !ok {
			return
		}
		if len(got) != digits {
			t.Fatalf("parseHex(%q, %d) = %q: wrong length", b, digits, got)
		}
		for _, c := range got {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				t.Fatalf("parseHex(%q, %d) = %q: not lower-case hex", b, digits, got)
			}
		}
	})
}

// FuzzAttributeParsers feeds the same bytes to every attribute parser; none
// may panic, and what they accept must hold their invariants.
func FuzzAttributeParsers(f *testing.F) {
	for _, s := range []string{
		"0\n", "-1\n", "1", "32\n", "up\n", "lowerlayerdown\n", "0xffff\n", "0x0000",
		"4294967295", "99999999999999999999", "-", " \t\n", "\xff\xfe", "mlx5_core.sf.2",
		"../../../bus/pci/drivers/ice", "0000:3b:02.1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, ok := parseInt(b, -1, 1<<16); ok && (n < -1 || n > 1<<16) {
			t.Fatalf("parseInt(%q) = %d out of range", b, n)
		}
		if c, ok := parseCarrier(b); ok && c != 0 && c != 1 {
			t.Fatalf("parseCarrier(%q) = %d", b, c)
		}
		if lt, ok := parseLinkType(b); ok && lt == "" {
			t.Fatalf("parseLinkType(%q) accepted with no name", b)
		}
		if w, ok := parseWord(b); ok && len(w) == 0 {
			t.Fatalf("parseWord(%q) accepted an empty word", b)
		}
		if k, empty, ok := parsePKey(b); ok && !empty && (len(k) != 6 || k[:2] != "0x") {
			t.Fatalf("parsePKey(%q) = %q", b, k)
		}
		_, _ = parseACPIIndex(b)
		s := string(b)
		_, _ = auxType(s)
		_, _ = numberedName(s, "virtfn")
		_ = linkBase(s)
		_ = quote(b)
		if a, err := NormalizeAddress(s); err == nil && !isPCIAddress(a) {
			t.Fatalf("NormalizeAddress(%q) = %q, not canonical", s, a)
		}
	})
}

// memFS is a fileSystem whose every file holds the same bytes and every
// link the same target, with a fixed function directory: it lets a fuzz
// test drive readFunction through every parser without touching disk.
type memFS struct {
	content []byte
	target  string
}

var memNames = []string{
	"vendor", "device", "subsystem_vendor", "subsystem_device", "class", "numa_node",
	"acpi_index", "sriov_totalvfs", "sriov_numvfs", "driver", "iommu_group", "physfn",
	"virtfn0", "virtfn12", "net", "infiniband", "virtio0", "vdpa0", "mlx5_core.sf.2",
}

func (m memFS) readFile(path string, buf []byte) (int, error) {
	return copy(buf, m.content), nil
}

func (m memFS) readlink(string) (string, error) { return m.target, nil }

func (m memFS) readDirNames(path string) ([]string, error) {
	switch {
	case strings.HasSuffix(path, "/infiniband"):
		return []string{"mlx5_0"}, nil
	case strings.HasSuffix(path, "/ports"):
		return []string{"1", "x"}, nil
	case strings.HasSuffix(path, "/pkeys"):
		return []string{"0", "1"}, nil
	case strings.HasSuffix(path, "/net"):
		return []string{"eth0"}, nil
	case strings.HasSuffix(path, "/devices/0000:3b:00.0"):
		return memNames, nil
	}
	return nil, fs.ErrNotExist
}

func (m memFS) stat(string) error { return nil }

// FuzzReadFunction runs the whole per-function reader over arbitrary
// attribute contents and link targets: it must not panic and must keep
// every field either known or at its unknown value.
func FuzzReadFunction(f *testing.F) {
	f.Add([]byte("0x8086\n"), "../../../bus/pci/drivers/ice")
	f.Add([]byte("32\n"), "../0000:3b:00.1")
	f.Add([]byte("0xffff"), "../../../kernel/iommu_groups/7")
	f.Add([]byte("1"), "../../../bus/vdpa/drivers/vhost_vdpa")
	f.Add([]byte(strings.Repeat("9", 300)), "")
	f.Fuzz(func(t *testing.T, content []byte, target string) {
		r := New(Options{SysfsRoot: "/nonexistent-root", DevRoot: "/nonexistent-dev", PCIIDsPath: "/nonexistent/pci.ids"})
		r.fs = memFS{content: content, target: target}
		sc := &scan{r: r, drivers: map[string]bool{}, vfio: map[string]bool{}}
		res := sc.newWorker().readFunction("0000:3b:00.0")
		d := res.dev
		if res.gone || d.Address != "0000:3b:00.0" {
			t.Fatalf("function lost: %+v", res)
		}
		if d.NUMANode < -1 || d.TotalVFs < -1 || d.NumVFs < -1 {
			t.Fatalf("counts out of range: %+v", d)
		}
		if d.Vendor != "" && len(d.Vendor) != 4 || d.Class != "" && len(d.Class) != 6 {
			t.Fatalf("IDs malformed: %+v", d)
		}
		if d.PF != "" && !isPCIAddress(d.PF) {
			t.Fatalf("PF %q is not an address", d.PF)
		}
		for _, i := range d.Interfaces {
			if i.Carrier < -1 || i.Carrier > 1 {
				t.Fatalf("carrier %d", i.Carrier)
			}
		}
	})
}
