// Command apifields writes the JSON field paths of the Kubernetes kinds that
// devledger's manifests hold, as the k8s.io/api it is built with has them.
// It is a module of its own so that it can pin old k8s.io/api versions
// without touching devledger's. deploy's tests (apiversions_test.go) check
// every kustomize output against the lists it writes:
//
//	go run . > k8s-1.28.txt
//	go run -modfile=k8s-1.30.mod . > k8s-1.30.txt
//
// go.mod pins k8s.io/api v0.28.15, k8s-1.30.mod v0.30.14 (the last patch
// releases; fields do not change within a minor release). For another
// release, copy go.mod to k8s-1.N.mod, require k8s.io/api v0.N.x there
// (go mod edit -modfile=k8s-1.N.mod -require=k8s.io/api@v0.N.x, then go
// mod tidy -modfile=k8s-1.N.mod) and write k8s-1.N.txt. A kind the
// manifests gain goes into kinds below, and all lists are written again.
//
// Each line is a path and its shape, "object" (a struct: its fields follow,
// under the path), "list" (a list of structs: under the path and "[]"),
// "map" (a map to structs: under the path and "{}") or "value" (anything
// else: a scalar, a list or map of scalars, a type with its own JSON form
// such as a quantity or a time). A line "== APIVERSION KIND" starts a
// kind.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// kinds are the kinds deploy/kustomize_test.go's newTyped knows.
var kinds = []struct {
	apiVersion, kind string
	obj              any
}{
	{"apps/v1", "DaemonSet", appsv1.DaemonSet{}},
	{"v1", "ConfigMap", corev1.ConfigMap{}},
	{"v1", "Namespace", corev1.Namespace{}},
	{"v1", "ResourceQuota", corev1.ResourceQuota{}},
	{"v1", "ServiceAccount", corev1.ServiceAccount{}},
}

var unmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// walk adds the fields of struct type t under prefix to paths. along holds
// the struct types on the way here: a type inside itself has no finite
// list, and none of these kinds has one.
func walk(t reflect.Type, prefix string, paths map[string]string, along []reflect.Type) {
	for _, a := range along {
		if a == t {
			panic(fmt.Sprintf("%s: %s contains itself", prefix, t))
		}
	}
	along = append(along, t)
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) && ft.Kind() == reflect.Struct {
			walk(ft, prefix, paths, along)
			continue
		}
		if name == "" {
			name = f.Name
		}
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		shape, elem, suffix := shapeOf(ft)
		paths[p] = shape
		if elem != nil {
			walk(elem, p+suffix, paths, along)
		}
	}
}

// shapeOf says how a field of type t looks in JSON, and for a struct, a
// list of structs or a map to structs, the struct type and the path
// suffix of its fields.
func shapeOf(t reflect.Type) (shape string, elem reflect.Type, suffix string) {
	if reflect.PointerTo(t).Implements(unmarshaler) || t.Implements(unmarshaler) {
		return "value", nil, ""
	}
	deref := func(t reflect.Type) reflect.Type {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		return t
	}
	switch t.Kind() {
	case reflect.Struct:
		return "object", t, ""
	case reflect.Slice, reflect.Array, reflect.Map:
		e := deref(t.Elem())
		if e.Kind() != reflect.Struct || reflect.PointerTo(e).Implements(unmarshaler) {
			if k := e.Kind(); k == reflect.Slice || k == reflect.Map {
				if ee := deref(e.Elem()); ee.Kind() == reflect.Struct && !reflect.PointerTo(ee).Implements(unmarshaler) {
					panic(fmt.Sprintf("%s: structs two levels down", t))
				}
			}
			return "value", nil, ""
		}
		if t.Kind() == reflect.Map {
			return "map", e, "{}"
		}
		return "list", e, "[]"
	}
	return "value", nil, ""
}

func main() {
	version := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/api" {
				version = d.Version
			}
		}
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "# The JSON fields of k8s.io/api %s, for the kinds devledger's manifests\n", version)
	fmt.Fprintf(w, "# hold. Written by deploy/testdata/apifields; do not edit.\n")
	for _, k := range kinds {
		paths := map[string]string{}
		walk(reflect.TypeOf(k.obj), "", paths, nil)
		keys := make([]string, 0, len(paths))
		for p := range paths {
			keys = append(keys, p)
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "== %s %s\n", k.apiVersion, k.kind)
		for _, p := range keys {
			fmt.Fprintf(w, "%s %s\n", p, paths[p])
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
