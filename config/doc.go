// Package config parses and validates devledger's configuration: the SR-IOV
// network device plugin's config.json schema, unchanged, in JSON or YAML, plus
// devledger's own fields. It decides which device joins which pool, and can say
// for every pool why a device was accepted or rejected.
package config
