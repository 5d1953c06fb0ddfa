package deploy_test

// Which Kubernetes releases the manifests work on. Every output is decoded
// against two APIs: the newest, k8s.io/api as go.mod has it (decodeStrict,
// on every document read and every object built), and the oldest the
// output supports, from a list of that release's fields.
//
// Why a list: Go builds one version of a module, so the 1.28 types cannot
// sit beside go.mod's. testdata/apifields is a small module of its own
// that pins an old k8s.io/api and writes down every JSON field path of the
// kinds the manifests hold, as that release has them. A field path the
// release does not have is what its API server's strict decoding refuses
// ("unknown field"). A field's type does not change within a served API
// version (apps/v1, v1), so the newest decode checks types for every
// release. Values (an enum member added later) are the API server's
// validation, not decoding, and no test here checks them.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// oldestKubernetes is the oldest release the overlays support.
const oldestKubernetes = "1.28"

// apiFields is one release's field list: for "APIVERSION KIND", each
// field path's shape (testdata/apifields/main.go says what they mean).
type apiFields map[string]map[string]string

// loadAPIFields reads testdata/apifields/k8s-<release>.txt.
func loadAPIFields(t *testing.T, release string) apiFields {
	t.Helper()
	p := filepath.Join("testdata", "apifields", "k8s-"+release+".txt")
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("%v (testdata/apifields writes it)", err)
	}
	defer f.Close()
	fields := apiFields{}
	var cur map[string]string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "== "):
			cur = map[string]string{}
			fields[strings.TrimPrefix(line, "== ")] = cur
		default:
			path, shape, ok := strings.Cut(line, " ")
			if !ok || cur == nil || !slices.Contains([]string{"object", "list", "map", "value"}, shape) {
				t.Fatalf("%s:%d: %q", p, n, line)
			}
			cur[path] = shape
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return fields
}

// crdGroups are API groups of custom resources: no Kubernetes release
// defines them, so only their own types (newTyped) judge them.
var crdGroups = []string{"monitoring.coreos.com"}

// unknownFields returns the field paths of o that the release does not
// have, sorted; an error if the list lacks o's kind.
func (f apiFields) unknownFields(o object) ([]string, error) {
	if group, _, ok := strings.Cut(o.APIVersion, "/"); ok && slices.Contains(crdGroups, group) {
		return nil, nil
	}
	known, ok := f[o.APIVersion+" "+o.Kind]
	if !ok {
		return nil, fmt.Errorf("no fields listed for %s %s: add the kind to testdata/apifields and write the lists again", o.APIVersion, o.Kind)
	}
	var doc map[string]any
	if err := json.Unmarshal(o.JSON, &doc); err != nil {
		return nil, err
	}
	var unknown []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			shape, ok := known[p]
			if !ok {
				unknown = append(unknown, p)
				continue
			}
			switch shape {
			case "object":
				if sub, ok := v.(map[string]any); ok {
					walk(p, sub)
				}
			case "list":
				items, _ := v.([]any)
				for _, it := range items {
					if sub, ok := it.(map[string]any); ok {
						walk(p+"[]", sub)
					}
				}
			case "map":
				vals, _ := v.(map[string]any)
				for _, it := range vals {
					if sub, ok := it.(map[string]any); ok {
						walk(p+"{}", sub)
					}
				}
			}
		}
	}
	walk("", doc)
	slices.Sort(unknown)
	return unknown, nil
}

// newestKubernetes is the release of go.mod's k8s.io/api (v0.N.x is 1.N),
// for messages. (A test binary's build info lists no dependencies.)
func newestKubernetes(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "k8s.io/api v0."); ok {
			minor, _, _ := strings.Cut(v, ".")
			return "1." + minor
		}
	}
	t.Fatal("go.mod requires no k8s.io/api")
	return ""
}

// TestAPIVersions: every output decodes strictly against the newest
// Kubernetes API and against the oldest release it is for; an output for a
// release newer than 1.28 does not decode against 1.28, so that the
// outputs for 1.28 stay apart from it and the check is seen to bite.
func TestAPIVersions(t *testing.T) {
	newest := newestKubernetes(t)
	lists := map[string]apiFields{oldestKubernetes: loadAPIFields(t, oldestKubernetes)}
	for _, out := range outputs() {
		t.Run(out.name(), func(t *testing.T) {
			r := render(t, out, map[string]bool{})
			t.Run("k8s-"+newest, func(t *testing.T) {
				for _, o := range r.objects {
					if _, _, err := decodeStrict(o.JSON); err != nil {
						t.Errorf("%s: %v", o.id(), err)
					}
				}
			})
			oldest := out.minKubernetes()
			if lists[oldest] == nil {
				lists[oldest] = loadAPIFields(t, oldest)
			}
			t.Run("k8s-"+oldest, func(t *testing.T) {
				for _, o := range r.objects {
					unknown, err := lists[oldest].unknownFields(o)
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range unknown {
						t.Errorf("%s: Kubernetes %s has no field %s", o.id(), oldest, p)
					}
				}
			})
			if oldest == oldestKubernetes {
				return
			}
			t.Run("not-k8s-"+oldestKubernetes, func(t *testing.T) {
				var newer []string
				for _, o := range r.objects {
					unknown, err := lists[oldestKubernetes].unknownFields(o)
					if err != nil {
						t.Fatal(err)
					}
					newer = append(newer, unknown...)
				}
				if len(newer) == 0 {
					t.Errorf("is for Kubernetes %s, but would decode on %s too", oldest, oldestKubernetes)
				}
			})
		})
	}
}

// TestAPIFieldsCheck: the field-list check refuses what the 1.28 API
// server would, and the lists are what the check assumes.
func TestAPIFieldsCheck(t *testing.T) {
	k128 := loadAPIFields(t, oldestKubernetes)
	k130 := loadAPIFields(t, "1.30")
	for _, k := range []string{"v1 Namespace", "v1 ServiceAccount", "v1 ConfigMap", "v1 ResourceQuota", "apps/v1 DaemonSet"} {
		if len(k128[k]) == 0 || len(k130[k]) == 0 {
			t.Errorf("no fields of %s listed", k)
		}
	}

	const rro = "spec.template.spec.containers[].volumeMounts[].recursiveReadOnly"
	ds := func(mount string) object {
		return object{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "x", Namespace: "ns", JSON: []byte(
			`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"x","labels":{"any.key/x":"y"}},` +
				`"spec":{"template":{"spec":{"hostNetwork":true,"containers":[{"name":"c",` +
				`"resources":{"limits":{"memory":"1Mi"}},"volumeMounts":[` + mount + `]}]}}}}`)}
	}
	for _, tc := range []struct {
		name   string
		fields apiFields
		mount  string
		want   []string
	}{
		{"1.28 plain mount", k128, `{"name":"sys","mountPath":"/s","readOnly":true}`, nil},
		{"1.28 recursiveReadOnly", k128, `{"name":"sys","mountPath":"/s","readOnly":true,"recursiveReadOnly":"IfPossible"}`, []string{rro}},
		{"1.30 recursiveReadOnly", k130, `{"name":"sys","mountPath":"/s","readOnly":true,"recursiveReadOnly":"IfPossible"}`, nil},
		{"miscased", k130, `{"name":"sys","MountPath":"/s"}`, []string{"spec.template.spec.containers[].volumeMounts[].MountPath"}},
		{"misspelt", k130, `{"name":"sys","mountPath":"/s","readonly":true}`, []string{"spec.template.spec.containers[].volumeMounts[].readonly"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.fields.unknownFields(ds(tc.mount))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("unknown fields %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := k128.unknownFields(object{APIVersion: "v1", Kind: "Pod", JSON: []byte(`{}`)}); err == nil {
		t.Error("a kind with no list passed")
	}
}
