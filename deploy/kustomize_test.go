package deploy_test

// A small kustomize for the tests: enough of it to build this folder's
// base and overlays (resources, strategic-merge patches, images), so that
// the tests check what `kubectl apply -k` would apply. A kustomization
// that uses anything else fails to decode, and the resolver grows with the
// manifests; the kustomize module itself is not worth its dependencies
// here.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomize's Kustomization the manifests
// use.
type kustomization struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Resources  []string   `json:"resources"`
	Patches    []patchRef `json:"patches"`
	Images     []imageRef `json:"images"`
}

type patchRef struct {
	// Path is a strategic-merge patch naming its target by kind, name and
	// namespace.
	Path string `json:"path"`
}

type imageRef struct {
	Name    string `json:"name"`
	NewName string `json:"newName"`
	NewTag  string `json:"newTag"`
}

// object is one rendered manifest.
type object struct {
	APIVersion, Kind, Name, Namespace string
	// Source is the file it came from, for messages.
	Source string
	// JSON is the object as JSON.
	JSON []byte
}

func (o object) id() string { return o.Kind + "/" + o.Namespace + "/" + o.Name }

// newTyped returns an empty value of the Kubernetes type for apiVersion
// and kind, or an error for a kind the manifests are not expected to hold.
func newTyped(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "apps/v1 DaemonSet":
		return &appsv1.DaemonSet{}, nil
	}
	return nil, fmt.Errorf("unexpected kind %s %s", apiVersion, kind)
}

// decodeStrict decodes one YAML document into its Kubernetes type: an
// unknown or duplicated field, or a value of the wrong type, is an error.
// The object's JSON is the document's own, with only the fields written
// (what a patch needs).
func decodeStrict(doc []byte) (any, object, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, object{}, err
	}
	typed, err := newTyped(head.APIVersion, head.Kind)
	if err != nil {
		return nil, object{}, err
	}
	if err := yaml.UnmarshalStrict(doc, typed); err != nil {
		return nil, object{}, err
	}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, object{}, err
	}
	return typed, object{APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name,
		Namespace: head.Metadata.Namespace, JSON: js}, nil
}

// splitDocs splits a YAML stream on "---" lines, dropping documents that
// hold nothing but comments.
func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	var cur [][]byte
	content := false
	flush := func() {
		if content {
			docs = append(docs, bytes.Join(cur, []byte("\n")))
		}
		cur, content = nil, false
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		trimmed := bytes.TrimSpace(line)
		if bytes.Equal(trimmed, []byte("---")) || bytes.HasPrefix(line, []byte("--- ")) {
			flush()
			continue
		}
		if len(trimmed) > 0 && trimmed[0] != '#' {
			content = true
		}
		cur = append(cur, line)
	}
	flush()
	return docs
}

// readKustomization reads dir's kustomization.yaml strictly.
func readKustomization(dir string) (kustomization, error) {
	var k kustomization
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return k, err
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return k, fmt.Errorf("%s/kustomization.yaml (or the test's resolver does not know a field it uses): %w", dir, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return k, fmt.Errorf("%s/kustomization.yaml: apiVersion %q kind %q", dir, k.APIVersion, k.Kind)
	}
	return k, nil
}

// build renders the kustomization in dir as kustomize would: resources in
// order (a directory is another kustomization), then patches, then images.
// used collects every file it reads.
func build(dir string, used map[string]bool) ([]object, error) {
	k, err := readKustomization(dir)
	if err != nil {
		return nil, err
	}
	used[filepath.Join(dir, "kustomization.yaml")] = true
	var objs []object
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s/kustomization.yaml: resource %s: %w", dir, r, err)
		}
		if st.IsDir() {
			sub, err := build(p, used)
			if err != nil {
				return nil, err
			}
			objs = append(objs, sub...)
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		used[p] = true
		for i, doc := range splitDocs(data) {
			typed, o, err := decodeStrict(doc)
			if err != nil {
				return nil, fmt.Errorf("%s (document %d): %w", p, i+1, err)
			}
			// From the typed value, so that YAML 1.1 spellings ("y",
			// "on") in string fields stay strings, as in kustomize.
			if o.JSON, err = json.Marshal(typed); err != nil {
				return nil, err
			}
			o.Source = p
			objs = append(objs, o)
		}
	}
	for _, pr := range k.Patches {
		p := filepath.Join(dir, pr.Path)
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("%s/kustomization.yaml: patch %s: %w", dir, pr.Path, err)
		}
		used[p] = true
		docs := splitDocs(data)
		if len(docs) != 1 {
			return nil, fmt.Errorf("%s: %d documents, want one patch", p, len(docs))
		}
		typed, patch, err := decodeStrict(docs[0])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		n := 0
		for i := range objs {
			if objs[i].id() != patch.id() {
				continue
			}
			n++
			merged, err := strategicpatch.StrategicMergePatch(objs[i].JSON, patch.JSON, typed)
			if err != nil {
				return nil, fmt.Errorf("%s on %s: %w", p, objs[i].Source, err)
			}
			objs[i].JSON = merged
		}
		if n != 1 {
			return nil, fmt.Errorf("%s: patches %s, which %d resources are", p, patch.id(), n)
		}
	}
	for i := range objs {
		if objs[i].Kind != "DaemonSet" || len(k.Images) == 0 {
			continue
		}
		var ds appsv1.DaemonSet
		if err := json.Unmarshal(objs[i].JSON, &ds); err != nil {
			return nil, err
		}
		for c := range ds.Spec.Template.Spec.Containers {
			ctr := &ds.Spec.Template.Spec.Containers[c]
			for _, im := range k.Images {
				ctr.Image = setImage(ctr.Image, im)
			}
		}
		if objs[i].JSON, err = json.Marshal(&ds); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// setImage applies one images entry to an image reference: the name
// without tag or digest must equal im.Name.
func setImage(ref string, im imageRef) string {
	name, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i+1:]
	}
	if name != im.Name {
		return ref
	}
	if im.NewName != "" {
		name = im.NewName
	}
	if im.NewTag != "" {
		tag = im.NewTag
	}
	if tag == "" {
		return name
	}
	return name + ":" + tag
}
