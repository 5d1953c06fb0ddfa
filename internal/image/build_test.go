package image_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/devledger/devledger/deploy"
	"github.com/devledger/devledger/internal/image"
)

// samplePCIIDs is the committed stand-in for Debian's pci.ids.
const samplePCIIDs = "../../testdata/pci.ids.sample"

// testBuild is a build of the image from a stand-in binary (the bytes are
// all that matter here) and the sample pci.ids.
func testBuild(t *testing.T) image.Build {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "devledger")
	if err := os.WriteFile(bin, []byte("\x7fELF stand-in for the devledger binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return image.Build{Binary: bin, PCIIDs: samplePCIIDs, Version: deploy.Version,
		Revision: "0123456789abcdef", Architecture: "amd64"}
}

// newImage builds b's image in memory.
func newImage(t *testing.T, b image.Build) v1.Image {
	t.Helper()
	spec, err := image.Devledger(b)
	if err != nil {
		t.Fatal(err)
	}
	img, err := image.NewImage(spec)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// buildLayout builds b's image into an OCI layout in a temp dir and reads
// it back from there.
func buildLayout(t *testing.T, b image.Build) (v1.Image, string) {
	t.Helper()
	img := newImage(t, b)
	dir := filepath.Join(t.TempDir(), "layout")
	ref := image.Repository + ":" + b.Version
	if err := image.WriteLayout(dir, ref, img); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("layout index has %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if got := desc.Annotations[image.RefNameAnnotation]; got != ref {
		t.Errorf("layout names the image %q, want %q", got, ref)
	}
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", desc.MediaType, types.OCIManifestSchema1)
	}
	back, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return back, dir
}

// imageFile is a regular file found in an image's filesystem.
type imageFile struct {
	mode int64
	uid  int
	gid  int
	data []byte
}

// imageFiles flattens img's layers and returns its regular files by path
// and its directories; anything else fails the test.
func imageFiles(t *testing.T, img v1.Image) (map[string]imageFile, []string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]imageFile{}
	var dirs []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = imageFile{mode: h.Mode, uid: h.Uid, gid: h.Gid, data: data}
		case tar.TypeDir:
			dirs = append(dirs, strings.TrimSuffix(h.Name, "/"))
		default:
			t.Errorf("image holds %s of tar type %q: want only regular files and their directories", h.Name, h.Typeflag)
		}
	}
	return files, dirs
}

func TestDevledgerImage(t *testing.T) {
	b := testBuild(t)
	img, _ := buildLayout(t, b)

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/devledger", "run"}) {
		t.Errorf("entrypoint %q", cf.Config.Entrypoint)
	}
	if len(cf.Config.Cmd) != 0 {
		t.Errorf("cmd %q, want none", cf.Config.Cmd)
	}
	if cf.Config.User != "0" {
		t.Errorf("user %q, want 0", cf.Config.User)
	}
	if !slices.Equal(cf.Config.Env, []string{"PATH=/"}) {
		t.Errorf("env %q, want [PATH=/]", cf.Config.Env)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":       "devledger",
		"org.opencontainers.image.description": image.Description,
		"org.opencontainers.image.version":     deploy.Version,
		"org.opencontainers.image.revision":    "0123456789abcdef",
		"org.opencontainers.image.source":      "https://github.com/devledger/devledger",
		"org.opencontainers.image.licenses":    image.Licenses,
	}
	if len(cf.Config.Labels) != len(wantLabels) {
		t.Errorf("labels %v, want exactly %v", cf.Config.Labels, wantLabels)
	}
	for k, v := range wantLabels {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2 (the binary, pci.ids)", len(layers))
	}
	for i, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("layer %d media type %s, want %s", i, mt, types.OCILayer)
		}
	}

	files, dirs := imageFiles(t, img)
	binary, _ := os.ReadFile(b.Binary)
	pciIDs, _ := os.ReadFile(b.PCIIDs)
	want := map[string]imageFile{
		"devledger":              {mode: 0o755, data: binary},
		"usr/share/misc/pci.ids": {mode: 0o644, data: pciIDs},
	}
	if len(files) != len(want) {
		t.Errorf("image files %v, want exactly %v", slices.Sorted(maps.Keys(files)), slices.Sorted(maps.Keys(want)))
	}
	for p, w := range want {
		got, ok := files[p]
		switch {
		case !ok:
			t.Errorf("image lacks %s", p)
		case !bytes.Equal(got.data, w.data):
			t.Errorf("%s: content differs from its source", p)
		case got.mode != w.mode || got.uid != 0 || got.gid != 0:
			t.Errorf("%s: mode %o owner %d:%d, want %o 0:0", p, got.mode, got.uid, got.gid, w.mode)
		}
	}
	slices.Sort(dirs)
	if wantDirs := []string{"usr", "usr/share", "usr/share/misc"}; !slices.Equal(dirs, wantDirs) {
		t.Errorf("image dirs %q, want only the parents of its files %q", dirs, wantDirs)
	}
}

// TestReproducible: the same inputs give the same digest, so an image
// built twice from one commit is one image.
func TestReproducible(t *testing.T) {
	b := testBuild(t)
	first, _ := buildLayout(t, b)
	second, _ := buildLayout(t, b)
	d1, err := first.Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := second.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: %s and %s", d1, d2)
	}
}

// TestTarball: the loadable tarball holds the same config and layers as
// the layout.
func TestTarball(t *testing.T) {
	b := testBuild(t)
	fromLayout, _ := buildLayout(t, b)
	img := newImage(t, b)
	file := filepath.Join(t.TempDir(), "image.tar")
	ref := image.Repository + ":" + b.Version
	if err := image.WriteTarball(file, ref, img); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(file, &tag)
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := fromLayout.ConfigName()
	c2, err := fromTar.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 {
		t.Errorf("tarball config %s, layout config %s", c2, c1)
	}
	files, _ := imageFiles(t, fromTar)
	if len(files) != 2 {
		t.Errorf("tarball image has %d files, want 2", len(files))
	}
}

func TestMissingInputs(t *testing.T) {
	good := testBuild(t)
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		change   func(*image.Build)
		noPCIIDs bool
		want     string
	}{
		{"no pci.ids file", func(b *image.Build) { b.PCIIDs = filepath.Join(t.TempDir(), "pci.ids") }, true, "apt-get install pci.ids"},
		{"empty pci.ids", func(b *image.Build) { b.PCIIDs = empty }, true, "empty"},
		{"pci.ids is a dir", func(b *image.Build) { b.PCIIDs = t.TempDir() }, true, "not a regular file"},
		{"no binary", func(b *image.Build) { b.Binary = filepath.Join(t.TempDir(), "devledger") }, false, "CGO_ENABLED=0 go build"},
		{"no version", func(b *image.Build) { b.Version = "" }, false, "no version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := good
			tc.change(&b)
			_, err := image.Devledger(b)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, image.ErrNoPCIIDs) != tc.noPCIIDs {
				t.Errorf("errors.Is(err, ErrNoPCIIDs) = %v, want %v: %v", !tc.noPCIIDs, tc.noPCIIDs, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestNewImageRefusesBadPaths(t *testing.T) {
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"relative", "/a/../b", "/", "/a//b"} {
		if _, err := image.NewImage(image.Spec{Files: []image.File{{Path: p, Source: src, Mode: 0o644}}}); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
	dup := []image.File{{Path: "/a", Source: src}, {Path: "/a", Source: src}}
	if _, err := image.NewImage(image.Spec{Files: dup}); err == nil {
		t.Error("a path given twice was accepted")
	}
}
