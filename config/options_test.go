package config

import (
	"strings"
	"testing"
)

// --resource-prefix names the prefix of every pool that sets none, as the
// SR-IOV plugin's flag does; a pool's own resourcePrefix wins, and two
// pools that end up with one name are refused under that name.
func TestResourcePrefixOption(t *testing.T) {
	src := `{"resourceList": [
	  {"resourceName": "a", "selectors": {"vendors": ["8086"]}},
	  {"resourceName": "b", "resourcePrefix": "vendor.example", "selectors": {"vendors": ["8086"]}}
	]}`
	cfg, err := ParseWith("config.json", []byte(src), Options{ResourcePrefix: "openshift.io"})
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{cfg.Resources[0].FullName(), cfg.Resources[1].FullName()}; got[0] != "openshift.io/a" || got[1] != "vendor.example/b" {
		t.Errorf("pools %q, want openshift.io/a and vendor.example/b", got)
	}
	if cfg := mustParse(t, "config.json", src); cfg.Resources[0].Prefix != DefaultResourcePrefix {
		t.Errorf("without the option, prefix %q, want %q", cfg.Resources[0].Prefix, DefaultResourcePrefix)
	}

	dup := `{"resourceList": [
	  {"resourceName": "a", "selectors": {"vendors": ["8086"]}},
	  {"resourceName": "a", "resourcePrefix": "openshift.io", "selectors": {"vendors": ["8086"]}}
	]}`
	if _, err := ParseWith("config.json", []byte(dup), Options{ResourcePrefix: "openshift.io"}); err == nil || !strings.Contains(err.Error(), "openshift.io/a") {
		t.Errorf("two pools named openshift.io/a: %v, want an error naming it", err)
	}
	if _, err := Parse("config.json", []byte(dup)); err != nil {
		t.Errorf("intel.com/a and openshift.io/a: %v", err)
	}

	// A prefix of the flag's that CDI cannot name devices by is said of
	// the resource, with where the prefix came from: the file has no
	// resourcePrefix to point at.
	_, err = ParseWith("config.json", []byte(`{"resourceList": [{"resourceName": "a", "selectors": {"vendors": ["8086"]}}]}`),
		Options{ResourcePrefix: "6wind.com", UseCDI: true})
	if want := `config.json: resourceList[0].resourceName: "a": CDI names this pool's devices by the default kind "6wind.com/net-pci" (its prefix "6wind.com" is the default or --resource-prefix), which is not a CDI kind`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("--resource-prefix 6wind.com --use-cdi: %v, want %s", err, want)
	}
}

func TestOptionsCheck(t *testing.T) {
	for prefix, ok := range map[string]bool{"": true, "openshift.io": true, "Intel.com": false, "k8s.kubernetes.io": false, "a/b": false} {
		err := Options{ResourcePrefix: prefix}.Check()
		if (err == nil) != ok {
			t.Errorf("Check(%q) = %v, want ok %v", prefix, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--resource-prefix") {
			t.Errorf("Check(%q) = %v, does not name the flag", prefix, err)
		}
	}
}
