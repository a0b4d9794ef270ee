// Package inventory loads and validates the description of a lab: its hosts,
// their GPUs and how jobs run there.
//
// A file is decoded into a small position-carrying tree first (YAML and JSON
// through yaml.v3 nodes, TOML through go-toml/v2), then checked key by key, so
// that every error names the file, the key path and, where the format has
// them, the line: "lab.yaml:14: hosts[2].gpus: want a list, a count or \"auto\"".
// viper is deliberately not the decoder: it folds every map key to lower case
// (environment variable names included) and forgets where a key came from.
//
// An Inventory is immutable once loaded; a reload produces a new one.
// This package imports no other package of gpudispatch.
package inventory
