package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/devledger/devledger/config"
)

// The SR-IOV network device plugin's flags (its image's entrypoint) are
// taken by run with their meaning, so that its DaemonSet's args work
// unchanged: --config-file, --resource-prefix and --use-cdi as they are,
// --log-level as a verbosity, and --log-dir ignored with a warning.
// docs/migrating.md has the table.

// defaultConfigPaths are where run looks for the config when no flag names
// one: devledger's own place, then the SR-IOV device plugin's.
var defaultConfigPaths = []string{"/etc/devledger/config.json", "/etc/pcidp/config.json"}

// configFlags are how run and scan find and read the pool config.
type configFlags struct {
	path, upstreamPath string
	opts               config.Options
}

func (c *configFlags) register(fs *flag.FlagSet, usage string) {
	fs.StringVar(&c.path, "config", "", usage)
	fs.StringVar(&c.upstreamPath, "config-file", "", "the SR-IOV device plugin's name for --config")
	fs.StringVar(&c.opts.ResourcePrefix, "resource-prefix", "", "the `PREFIX` of a pool that sets no resourcePrefix (default "+config.DefaultResourcePrefix+"), as the SR-IOV device plugin's flag")
	fs.BoolVar(&c.opts.UseCDI, "use-cdi", false, "answer every pool's Allocate with CDI device names, as if each set cdi.enabled (the SR-IOV device plugin's flag); run writes the specs to its --cdi-spec-dir")
}

// resolve returns the config file to read: the one a flag names, else the
// first of defaults that exists ("" when there are none). Both flags
// naming different files is an error.
func (c *configFlags) resolve(defaults []string) (string, error) {
	if err := c.opts.Check(); err != nil {
		return "", usageErr(err)
	}
	switch {
	case c.path != "" && c.upstreamPath != "" && c.path != c.upstreamPath:
		return "", usageErrf("--config %s and --config-file %s name different files: give one", c.path, c.upstreamPath)
	case c.path != "":
		return c.path, nil
	case c.upstreamPath != "":
		return c.upstreamPath, nil
	}
	for _, p := range defaults {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if len(defaults) == 0 {
		return "", nil
	}
	return "", usageErrf("no config at %s: mount the devledger-config ConfigMap there (see deploy/base), or name the file with --config", strings.Join(defaults, " or "))
}

// upstreamFlags are the SR-IOV device plugin's flags that devledger takes
// but does not act on.
type upstreamFlags struct {
	logDir string
}

func (u *upstreamFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&u.logDir, "log-dir", "", "the SR-IOV device plugin's flag: accepted and ignored, with a warning (devledger logs to stderr)")
}

// warn logs what devledger does not do of what the flags asked.
func (u *upstreamFlags) warn(log zerolog.Logger) {
	if u.logDir != "" {
		log.Warn().Str("flag", "--log-dir").Str("dir", u.logDir).Msg("--log-dir is the SR-IOV device plugin's flag and is ignored: devledger logs to stderr, which the container runtime keeps and rotates")
	}
}

// logLevel reads --log-level: a zerolog level by name, or the SR-IOV
// device plugin's glog verbosity, a number, read by the Kubernetes logging
// conventions (4 and above is debug).
func logLevel(s string) (zerolog.Level, error) {
	if v, err := strconv.Atoi(s); err == nil {
		if v < 0 {
			return 0, errors.New("a verbosity is 0 or more")
		}
		if v >= 4 {
			return zerolog.DebugLevel, nil
		}
		return zerolog.InfoLevel, nil
	}
	switch s {
	case "debug", "info", "warn", "error":
		return zerolog.ParseLevel(s)
	}
	return 0, fmt.Errorf("want debug, info, warn, error or a verbosity (0-10)")
}
