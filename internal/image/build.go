package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Repository is the image's name in the deploy/ manifests; a tag is the
// version.
const Repository = "ghcr.io/devledger/devledger"

// RefNameAnnotation names an image in an OCI layout's index.
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// NewImage builds the image spec describes, with OCI media types. Every
// file is read when NewImage is called; nothing is written.
func NewImage(spec Spec) (v1.Image, error) {
	if len(spec.Files) == 0 {
		return nil, fmt.Errorf("image: no files")
	}
	created := spec.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: spec.Architecture,
		OS:           spec.OS,
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			Entrypoint: spec.Entrypoint,
			User:       spec.User,
			Env:        spec.Env,
			Labels:     spec.Labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	seen := map[string]bool{}
	for _, f := range spec.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("image file %q: want a clean absolute path", f.Path)
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("image file %s: given twice", f.Path)
		}
		seen[f.Path] = true
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, fmt.Errorf("image file %s: %w", f.Path, err)
		}
		tarData, err := fileLayer(f.Path, f.Mode, data, created)
		if err != nil {
			return nil, fmt.Errorf("image file %s: %w", f.Path, err)
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(tarData)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("image file %s: layer: %w", f.Path, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer: layer,
			History: v1.History{
				Created:   v1.Time{Time: created},
				CreatedBy: fmt.Sprintf("COPY %s %s", path.Base(f.Source), f.Path),
			},
		})
		if err != nil {
			return nil, fmt.Errorf("image file %s: %w", f.Path, err)
		}
	}
	return img, nil
}

// fileLayer is the uncompressed tar of one file and its parent
// directories, owned by root, every time set to mtime.
func fileLayer(p string, mode os.FileMode, data []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rel := strings.TrimPrefix(p, "/")
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/") + "/"
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755,
			ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(mode.Perm()),
		Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as an OCI image layout in dir, replacing what the
// dir held, and names it ref in the layout's index.
func WriteLayout(dir, ref string, img v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image layout %s: %w", dir, err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{RefNameAnnotation: ref})); err != nil {
		return fmt.Errorf("image layout %s: %w", dir, err)
	}
	return nil
}

// WriteTarball writes img to file as a tarball that `docker load` and
// `podman load` take, tagged ref ("ghcr.io/devledger/devledger:0.1.0").
func WriteTarball(file, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image tag %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		return fmt.Errorf("image tarball %s: %w", file, err)
	}
	return nil
}
