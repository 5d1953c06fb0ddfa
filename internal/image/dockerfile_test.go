package image_test

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/devledger/devledger/deploy"
	"github.com/devledger/devledger/internal/image"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line    int
	keyword string // upper case
	args    string
}

// stage is one FROM and the instructions under it.
type stage struct {
	from, name string
	body       []instruction
}

// parseDockerfile splits a Dockerfile into stages: comments dropped,
// lines ending in a backslash joined to the next. It knows only what our
// Dockerfile uses (no heredocs, no escape directive).
func parseDockerfile(t *testing.T, text string) (global []instruction, stages []stage) {
	t.Helper()
	var cur strings.Builder
	start := 0
	var all []instruction
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		keyword, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		all = append(all, instruction{line: start, keyword: strings.ToUpper(keyword), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("Dockerfile ends inside a continued line")
	}
	for _, in := range all {
		if in.keyword == "FROM" {
			f := strings.Fields(in.args)
			st := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			global = append(global, in)
			continue
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	return global, stages
}

// words splits shell-style words: double quotes group, a backslash escapes.
func words(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	var w strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == '"':
			quoted = !quoted
			inWord = true
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

var argRef = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// expand substitutes ${NAME} and $NAME from vars; an unknown name fails.
func expand(t *testing.T, s string, vars map[string]string) string {
	t.Helper()
	return argRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := argRef.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		v, ok := vars[name]
		if !ok {
			t.Errorf("%q refers to $%s, which is not an ARG of its stage", s, name)
		}
		return v
	})
}

// TestDockerfileMatchesImage checks that the Dockerfile's final stage
// would give the image that NewImage builds: the same files from the same
// places, entrypoint, user, environment and labels, and nothing else.
func TestDockerfileMatchesImage(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	_, stages := parseDockerfile(t, string(data))
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	byName := map[string]stage{}
	for _, st := range stages {
		byName[st.name] = st
	}
	final := stages[len(stages)-1]
	if final.from != "scratch" {
		t.Errorf("final stage FROM %s, want scratch (nothing but our files)", final.from)
	}

	b := testBuild(t)
	spec, err := image.Devledger(b)
	if err != nil {
		t.Fatal(err)
	}
	// The build arguments a release passes: VERSION as its default,
	// REVISION given.
	buildArgs := map[string]string{"REVISION": b.Revision}

	args := map[string]string{}
	copied := map[string]string{} // image path -> stage:source
	var entrypoint []string
	var user string
	var env []string
	labels := map[string]string{}
	for _, in := range final.body {
		switch in.keyword {
		case "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			if v, ok := buildArgs[name]; ok {
				def = v
			}
			args[name] = def
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) != 3 || !strings.HasPrefix(f[0], "--from=") {
				t.Errorf("line %d: COPY %s: want COPY --from=STAGE SRC DST (a file from a build stage)", in.line, in.args)
				continue
			}
			copied[f[2]] = strings.TrimPrefix(f[0], "--from=") + ":" + f[1]
		case "ENV":
			for _, w := range words(t, in.args) {
				env = append(env, expand(t, w, args))
			}
		case "LABEL":
			for _, w := range words(t, in.args) {
				k, v, ok := strings.Cut(w, "=")
				if !ok {
					t.Errorf("line %d: LABEL %q: want key=value", in.line, w)
				}
				labels[k] = expand(t, v, args)
			}
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Errorf("line %d: ENTRYPOINT %s: want the JSON form: %v", in.line, in.args, err)
			}
		default:
			t.Errorf("line %d: %s in the final stage: it may only copy files and set metadata", in.line, in.keyword)
		}
	}

	var wantPaths []string
	for _, f := range spec.Files {
		wantPaths = append(wantPaths, f.Path)
		if _, ok := copied[f.Path]; !ok {
			t.Errorf("the final stage does not COPY %s", f.Path)
		}
	}
	for p := range copied {
		if !slices.Contains(wantPaths, p) {
			t.Errorf("the final stage copies %s, which the image does not have", p)
		}
	}
	if !slices.Equal(entrypoint, spec.Entrypoint) {
		t.Errorf("ENTRYPOINT %q, image %q", entrypoint, spec.Entrypoint)
	}
	if user != spec.User {
		t.Errorf("USER %q, image %q", user, spec.User)
	}
	if !slices.Equal(env, spec.Env) {
		t.Errorf("ENV %q, image %q", env, spec.Env)
	}
	if !maps.Equal(labels, spec.Labels) {
		t.Errorf("LABELs %v\nimage labels %v", labels, spec.Labels)
	}

	// Where the two files come from: a static, version-stamped build of
	// cmd/devledger, and Debian's pci.ids package.
	checkSource := func(imagePath string, check func(st stage, src string)) {
		t.Helper()
		from, src, _ := strings.Cut(copied[imagePath], ":")
		st, ok := byName[from]
		if !ok {
			t.Errorf("%s is copied from stage %q, which the Dockerfile does not name", imagePath, from)
			return
		}
		check(st, src)
	}
	checkSource(image.BinaryPath, func(st stage, src string) {
		found := false
		for _, in := range st.body {
			if in.keyword == "RUN" && strings.Contains(in.args, "go build") && strings.Contains(in.args, "-o "+src+" ./cmd/devledger") {
				found = true
				for _, want := range []string{"CGO_ENABLED=0", "-X main.version=${VERSION}"} {
					if !strings.Contains(in.args, want) {
						t.Errorf("line %d: the binary's build lacks %s", in.line, want)
					}
				}
			}
		}
		if !found {
			t.Errorf("stage %s has no RUN go build ... -o %s ./cmd/devledger", st.name, src)
		}
	})
	checkSource(image.PCIIDsPath, func(st stage, src string) {
		if src != image.DebianPCIIDs {
			t.Errorf("pci.ids copied from %s, where Debian's package puts it is %s", src, image.DebianPCIIDs)
		}
		if !strings.HasPrefix(st.from, "debian:") {
			t.Errorf("pci.ids stage FROM %s, want a Debian image", st.from)
		}
		found := false
		for _, in := range st.body {
			if in.keyword == "RUN" && strings.Contains(in.args, "apt-get install") && slices.Contains(strings.Fields(in.args), "pci.ids") {
				found = true
			}
		}
		if !found {
			t.Errorf("stage %s does not apt-get install pci.ids", st.name)
		}
	})
}

// TestDockerfileVersion: every ARG VERSION defaults to deploy/VERSION, so
// a plain `docker build` stamps the release the manifests deploy.
func TestDockerfileVersion(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	global, stages := parseDockerfile(t, string(data))
	all := global
	for _, st := range stages {
		all = append(all, st.body...)
	}
	n := 0
	for _, in := range all {
		if in.keyword != "ARG" {
			continue
		}
		name, def, _ := strings.Cut(in.args, "=")
		if name == "VERSION" {
			n++
			if def != deploy.Version {
				t.Errorf("line %d: ARG VERSION=%s, deploy/VERSION says %s", in.line, def, deploy.Version)
			}
		}
	}
	if n == 0 {
		t.Error("no ARG VERSION")
	}
}

func TestParseDockerfile(t *testing.T) {
	text := "# c\nARG A=1\nFROM x AS b\nRUN a \\\n  # inner comment\n  b\n\nFROM scratch\nLABEL k=\"v w\" j=\"${A}\"\n"
	global, stages := parseDockerfile(t, text)
	if len(global) != 1 || global[0].args != "A=1" {
		t.Errorf("global %+v", global)
	}
	if len(stages) != 2 || stages[0].name != "b" || stages[1].from != "scratch" {
		t.Fatalf("stages %+v", stages)
	}
	if got := stages[0].body[0].args; got != "a  b" {
		t.Errorf("joined RUN %q", got)
	}
	if got := words(t, stages[1].body[0].args); !slices.Equal(got, []string{"k=v w", "j=${A}"}) {
		t.Errorf("words %q", got)
	}
	if got := expand(t, "x${A}y$A", map[string]string{"A": "1"}); got != "x1y1" {
		t.Errorf("expand %q", got)
	}
}
