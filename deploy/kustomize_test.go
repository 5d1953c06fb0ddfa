package deploy_test

// A small kustomize for the tests: enough of it to build this folder's
// base, overlays and components (resources, components, strategic-merge
// patches, images), so that the tests check what `kubectl apply -k` would
// apply. A kustomization that uses anything else fails to decode, and the
// resolver grows with the manifests; the kustomize module itself is not
// worth its dependencies here.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomize's Kustomization and Component
// the manifests use.
type kustomization struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Resources  []string   `json:"resources"`
	Components []string   `json:"components"`
	Patches    []patchRef `json:"patches"`
	Images     []imageRef `json:"images"`
}

// The two kinds of kustomization: one that can be built on its own, and a
// component, which only a kustomization's components list can name and
// which patches what that kustomization has gathered so far.
const (
	kindKustomization = "Kustomization"
	kindComponent     = "Component"
)

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

// newTyped returns an empty value of the Go type for apiVersion and kind,
// or an error for a kind the manifests are not expected to hold. The
// Kubernetes kinds are k8s.io/api's types, as go.mod has them: the newest
// API the manifests are decoded against (apiversions_test.go adds the
// oldest). The Prometheus Operator's kinds are this folder's own subsets of
// theirs (monitoring_test.go).
func newTyped(apiVersion, kind string) (runtime.Object, error) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 ResourceQuota":
		return &corev1.ResourceQuota{}, nil
	case "apps/v1 DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "monitoring.coreos.com/v1 PodMonitor":
		return &podMonitor{}, nil
	}
	return nil, fmt.Errorf("unexpected kind %s %s", apiVersion, kind)
}

// apiDecoder decodes as the API server does a request with strict field
// validation (kubectl's default): field names match case-sensitively, and
// an unknown or duplicated field is an error. Its scheme is empty, so it
// decodes into whatever object it is given.
var apiDecoder = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, runtime.NewScheme(), runtime.NewScheme(),
	kjson.SerializerOptions{Yaml: true, Strict: true})

// decodeStrict decodes one YAML document into its type: an unknown,
// duplicated or miscased field, or a value of the wrong type, is an error.
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
	// sigs.k8s.io/yaml reads as kustomize does (a YAML 1.1 "on" in a
	// string field stays a string), but matches field names as
	// encoding/json does, ignoring case; the API server's decoder does not.
	if err := yaml.UnmarshalStrict(doc, typed); err != nil {
		return nil, object{}, err
	}
	check, _ := newTyped(head.APIVersion, head.Kind)
	if _, _, err := apiDecoder.Decode(doc, nil, check); err != nil {
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

// readKustomization reads dir's kustomization.yaml strictly; it must be
// of kind (kindKustomization or kindComponent).
func readKustomization(dir, kind string) (kustomization, error) {
	var k kustomization
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return k, err
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return k, fmt.Errorf("%s/kustomization.yaml (or the test's resolver does not know a field it uses): %w", dir, err)
	}
	want := map[string]string{kindKustomization: "kustomize.config.k8s.io/v1beta1", kindComponent: "kustomize.config.k8s.io/v1alpha1"}
	if k.APIVersion != want[kind] || k.Kind != kind {
		return k, fmt.Errorf("%s/kustomization.yaml: apiVersion %q kind %q, want %s %s", dir, k.APIVersion, k.Kind, want[kind], kind)
	}
	return k, nil
}

// build renders the kustomization in dir as kustomize would: resources in
// order (a directory is another kustomization, built on its own), then
// components, then patches, then images. used collects every file it
// reads.
func build(dir string, used map[string]bool) ([]object, error) {
	return accumulate(dir, kindKustomization, nil, used)
}

// buildWith renders what a kustomization of your own would that names dir
// as its one resource and components (directories) as its components.
func buildWith(dir string, components []string, used map[string]bool) ([]object, error) {
	objs, err := build(dir, used)
	if err != nil {
		return nil, err
	}
	for _, c := range components {
		if objs, err = accumulate(c, kindComponent, objs, used); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// accumulate adds what the kustomization of kind in dir holds to objs and
// applies its patches and images to all of them. A Kustomization starts
// from nothing; a component works on what the kustomization naming it has
// gathered so far, as kustomize applies components.
func accumulate(dir, kind string, objs []object, used map[string]bool) ([]object, error) {
	k, err := readKustomization(dir, kind)
	if err != nil {
		return nil, err
	}
	used[filepath.Join(dir, "kustomization.yaml")] = true
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
	for _, c := range k.Components {
		if objs, err = accumulate(filepath.Join(dir, c), kindComponent, objs, used); err != nil {
			return nil, err
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
			if merged, err = orderAsKustomize(merged, patch.JSON, typed); err != nil {
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

// orderAsKustomize puts merged's list elements in the order kustomize
// gives them. In a list merged by key (env by name, volumeMounts by
// mountPath), kustomize puts the elements the patch names first, in the
// patch's order, and then the others in their own; apimachinery's merge
// keeps the list's own order. The order matters in env: the kubelet
// expands $(VAR) only from the variables before it.
func orderAsKustomize(merged, patch []byte, typed any) ([]byte, error) {
	meta, err := strategicpatch.NewPatchMetaFromStruct(typed)
	if err != nil {
		return nil, err
	}
	var m, pm map[string]any
	if err := json.Unmarshal(merged, &m); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(patch, &pm); err != nil {
		return nil, err
	}
	reorder(m, pm, meta)
	return json.Marshal(m)
}

// reorder does orderAsKustomize's work on one object and what it holds.
// Fields the schema does not describe as a struct or a keyed list (maps
// such as labels, lists of scalars) are left as they are.
func reorder(merged, patch map[string]any, meta strategicpatch.LookupPatchMeta) {
	for k, pv := range patch {
		switch pv := pv.(type) {
		case map[string]any:
			mv, ok := merged[k].(map[string]any)
			if !ok {
				continue
			}
			if sub, _, err := meta.LookupPatchMetadataForStruct(k); err == nil {
				reorder(mv, pv, sub)
			}
		case []any:
			mv, ok := merged[k].([]any)
			if !ok {
				continue
			}
			sub, pmeta, err := meta.LookupPatchMetadataForSlice(k)
			if err != nil || pmeta.GetPatchMergeKey() == "" {
				continue
			}
			key := pmeta.GetPatchMergeKey()
			var first, rest []any
			taken := map[int]bool{}
			for _, pe := range pv {
				pe, ok := pe.(map[string]any)
				if !ok {
					continue
				}
				for i, me := range mv {
					if me, ok := me.(map[string]any); ok && !taken[i] && me[key] == pe[key] {
						reorder(me, pe, sub)
						first = append(first, me)
						taken[i] = true
						break
					}
				}
			}
			for i, me := range mv {
				if !taken[i] {
					rest = append(rest, me)
				}
			}
			merged[k] = append(first, rest...)
		}
	}
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
