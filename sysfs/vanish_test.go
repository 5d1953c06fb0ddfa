package sysfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devledger/devledger/testdata/sysfsgen"
)

// unplugFS hot-unplugs one function right after its directory is listed:
// the window between readdir and the reads of its attributes.
type unplugFS struct {
	osFS
	roots sysfsgen.Roots
	addr  string
	done  bool
	t     *testing.T
}

func (u *unplugFS) readDirNames(path string) ([]string, error) {
	names, err := u.osFS.readDirNames(path)
	if !u.done && strings.HasSuffix(path, "/"+u.addr) {
		u.done = true
		if err := u.roots.Remove(u.addr); err != nil {
			u.t.Fatal(err)
		}
	}
	return names, err
}

// A function unplugged between the listing of its directory and the reads
// of its files is left out, as one gone before its listing is (see
// Reader.Scan), not kept as a device of no vendor, class or driver.
func TestAFunctionUnpluggedWhileItIsReadIsLeftOut(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	r := testReader(t, roots, Options{Workers: 1})
	const vf = "0000:3b:01.2"
	r.fs = &unplugFS{roots: roots, addr: vf, t: t}
	devs := scanOK(t, r)
	if d, ok := byAddress(devs)[vf]; ok {
		t.Errorf("unplugged %s listed: vendor %q class %q driver %q warnings %q", vf, d.Vendor, d.Class, d.Driver, d.Warnings)
	}
}

// renameFS renames one interface right after its function's net/ is listed,
// as udev does moments after a VF's netdev appears (the uevent that also
// asks for the rescan).
type renameFS struct {
	osFS
	netDir, from, to string
	done             bool
	t                *testing.T
}

func (u *renameFS) readDirNames(path string) ([]string, error) {
	names, err := u.osFS.readDirNames(path)
	if !u.done && path == u.netDir {
		u.done = true
		if err := os.Rename(filepath.Join(u.netDir, u.from), filepath.Join(u.netDir, u.to)); err != nil {
			u.t.Fatal(err)
		}
	}
	return names, err
}

// An interface renamed between the listing of net/ and the reads of its
// files is left out, with no warnings, not kept under its old name with no
// link type: the next scan lists it under its new name.
func TestAnInterfaceRenamedWhileItIsReadIsLeftOut(t *testing.T) {
	roots := sysfsgen.TempScenario(t, sysfsgen.ScenarioSRIOV)
	r := testReader(t, roots, Options{Workers: 1})
	const vf = "0000:3b:01.0"
	net := filepath.Join(r.busDir, vf, "net")
	rename := &renameFS{netDir: net, from: "ens785f0v0", to: "ens785f0v9", t: t}
	r.fs = rename
	d, ok := byAddress(scanOK(t, r))[vf]
	if !rename.done {
		t.Fatalf("%s was never listed: the rename did not happen", net)
	}
	if !ok {
		t.Fatalf("%s not listed: only its interface was renamed", vf)
	}
	for _, ifc := range d.Interfaces {
		if ifc.Name == "ens785f0v0" {
			t.Errorf("renamed interface kept under its old name: %+v; warnings %q", ifc, d.Warnings)
		}
	}
	if len(d.Warnings) > 0 {
		t.Errorf("a renamed interface warns: %q", d.Warnings)
	}
}
