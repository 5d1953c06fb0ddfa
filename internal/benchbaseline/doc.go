// Package benchbaseline holds the bare pieces devledger's speed benchmarks
// measure the daemon against, in the same run: a DevicePlugin server that
// answers from memory, served on a unix socket that can be re-created after
// the kubelet deletes it. It decides nothing and records nothing; that is
// the point of a baseline. Only benchmarks and the startbaseline command
// use it; the devledger binary does not.
package benchbaseline
