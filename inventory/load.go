package inventory

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Error is one problem in an inventory file, located as well as the format
// allows.
type Error struct {
	File string
	Line int    // 0 when unknown
	Key  string // e.g. "hosts[2].gpus"; "" for the whole file
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	if e.Key != "" {
		b.WriteString(": " + e.Key)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Load reads and validates the inventory at path; its extension (.yaml,
// .yml, .json or .toml) chooses the format. Every problem found is reported,
// each as an *Error, joined.
func Load(path string) (*Inventory, error) {
	format, err := formatOf(path)
	if err != nil {
		return nil, err
	}
	// A reader of a FIFO waits for ever.
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("inventory: %s is not a regular file (a FIFO, a socket, a device or a directory): name the inventory file itself", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	inv, err := Parse(path, data, format)
	if inv != nil {
		inv.Digest = sha256.Sum256(data)
	}
	return inv, err
}

func formatOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return "yaml", nil
	case ".json":
		return "json", nil
	case ".toml":
		return "toml", nil
	}
	return "", &Error{File: path, Msg: "unknown format: name the file .yaml, .yml, .json or .toml"}
}

// Parse validates an inventory given as bytes in format ("yaml", "json" or
// "toml"); file names it in errors and anchors relative paths.
func Parse(file string, data []byte, format string) (*Inventory, error) {
	root, err := decode(data, format)
	if err != nil {
		var le *lineError
		if errors.As(err, &le) {
			return nil, &Error{File: file, Line: le.line, Msg: le.err.Error()}
		}
		return nil, &Error{File: file, Msg: err.Error()}
	}
	c := &checker{file: file}
	inv := c.inventory(root)
	if len(c.errs) > 0 {
		sort.SliceStable(c.errs, func(i, j int) bool { return c.errs[i].Line < c.errs[j].Line })
		errs := make([]error, len(c.errs))
		for i, e := range c.errs {
			errs[i] = e
		}
		return nil, errors.Join(errs...)
	}
	inv.File = file
	return inv, nil
}

// checker walks the tree, building the inventory and collecting errors.
type checker struct {
	file string
	errs []*Error
}

func (c *checker) fail(n *node, key, format string, args ...any) {
	c.errs = append(c.errs, &Error{File: c.file, Line: n.line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// fields calls set for each key of a mapping, failing on unknown keys.
func (c *checker) fields(n *node, path string, known map[string]func(key string, v *node)) {
	if !n.isMap {
		c.fail(n, path, "want a mapping, got %s", n.describe())
		return
	}
	for i, k := range n.keys {
		key := k
		if path != "" {
			key = path + "." + k
		}
		set, ok := known[k]
		if !ok {
			names := make([]string, 0, len(known))
			for name := range known {
				names = append(names, name)
			}
			sort.Strings(names)
			c.errs = append(c.errs, &Error{File: c.file, Line: n.kline[i], Key: key,
				Msg: "unknown key (known: " + strings.Join(names, ", ") + ")"})
			continue
		}
		set(key, n.vals[i])
	}
}

func (c *checker) str(dst *string) func(string, *node) {
	return func(key string, v *node) {
		if v.isMap || v.isSeq || v.typ != tString {
			c.fail(v, key, "want a string, got %s", v.describe())
			return
		}
		if strings.IndexByte(v.text, 0) >= 0 {
			c.fail(v, key, "must not contain a NUL byte")
			return
		}
		*dst = v.text
	}
}

func (c *checker) boolean(dst *bool) func(string, *node) {
	return func(key string, v *node) {
		if v.isMap || v.isSeq || v.typ != tBool {
			c.fail(v, key, "want true or false, got %s", v.describe())
			return
		}
		*dst = v.text == "true"
	}
}

// oneOf accepts one of the strings allowed.
func (c *checker) oneOf(dst *string, allowed ...string) func(string, *node) {
	return func(key string, v *node) {
		if v.isMap || v.isSeq || v.typ != tString || !slices.Contains(allowed, v.text) {
			c.fail(v, key, "want one of %s, got %s", strings.Join(allowed, ", "), v.describe())
			return
		}
		*dst = v.text
	}
}

// integer accepts a whole number in [lo, hi].
func (c *checker) integer(dst *int, lo, hi int) func(string, *node) {
	return func(key string, v *node) {
		n, ok := c.intValue(v)
		if !ok || n < lo || n > hi {
			c.fail(v, key, "want a whole number from %d to %d, got %s", lo, hi, v.describe())
			return
		}
		*dst = n
	}
}

func (c *checker) intValue(v *node) (int, bool) {
	if v.isMap || v.isSeq || v.typ != tInt {
		return 0, false
	}
	n, err := strconv.ParseInt(v.text, 0, 32)
	return int(n), err == nil
}

// settings are the keys a host and the defaults section share (a hostname
// names one machine, so only hosts have it).
type settings struct {
	Connection
	workdir, setup string
	sync           string
	login          string
	conda, venv    string
	// condaSet and venvSet say the key was given: a host's empty value
	// then clears the defaults' env.
	condaSet, venvSet bool
	modules           []string
	tags              []string
	returns           []string
	shell             string
	ncclIfname        string
	env               map[string]string
	slotsPerGPU       int
	// mem is the jobs' default GPU memory (MiB); memoryMB, reserveMB and
	// maxPerGPU the GPUs' budget (reserveMB -1: not given).
	mem, memoryMB, reserveMB, maxPerGPU int
}

func (c *checker) settingsFields(s *settings) map[string]func(string, *node) {
	return map[string]func(string, *node){
		"port":          c.integer(&s.Port, 1, 65535),
		"user":          c.str(&s.User),
		"identity_file": c.str(&s.IdentityFile),
		"proxy_jump":    c.str(&s.ProxyJump),
		"workdir":       c.str(&s.workdir),
		"sync":          c.str(&s.sync),
		"setup":         c.str(&s.setup),
		"slots_per_gpu": c.integer(&s.slotsPerGPU, 1, 1024),
		"mem":           c.memSize(&s.mem),
		"memory_mb":     c.integer(&s.memoryMB, 1, 1<<24),
		"reserve_mb":    c.integer(&s.reserveMB, 0, 1<<24),
		"max_per_gpu":   c.integer(&s.maxPerGPU, 1, 1024),
		"login":         c.oneOf(&s.login, LoginPerSlot, LoginPerJob),
		"conda":         c.given(c.str(&s.conda), &s.condaSet),
		"venv":          c.given(c.str(&s.venv), &s.venvSet),
		"modules":       c.words(&s.modules, "modules ([cuda/12.1, cudnn])", "a module name (letters, digits and ./_+-@:)", ValidModule),
		"tags":          c.words(&s.tags, "tags ([nvlink, ib])", "a tag (letters, digits, '.', '_' and '-')", ValidTag),
		"return":        c.returns(&s.returns),
		"shell":         c.oneOf(&s.shell, ShellLogin, ShellInteractive),
		"env":           c.env(&s.env),
		"nccl_ifname":   c.str(&s.ncclIfname),
	}
}

// given runs set, and records that the key was given.
func (c *checker) given(set func(string, *node), was *bool) func(string, *node) {
	return func(key string, v *node) {
		*was = true
		set(key, v)
	}
}

// tagRE is a tag's form.
var tagRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidTag reports whether t is a tag a host may have and a job ask for.
func ValidTag(t string) bool { return len(t) <= 64 && tagRE.MatchString(t) }

// words accepts a list of words that valid says are each one, as
// modules: and tags: take; list and item say what is wanted, for the
// message.
func (c *checker) words(dst *[]string, list, item string, valid func(string) bool) func(string, *node) {
	return func(key string, v *node) {
		if !v.isSeq {
			c.fail(v, key, "want a list of %s, got %s", list, v.describe())
			return
		}
		*dst = []string{}
		for i, it := range v.items {
			k := fmt.Sprintf("%s[%d]", key, i)
			if it.isMap || it.isSeq || it.typ == tNull || !valid(it.text) {
				c.fail(it, k, "want %s, got %s", item, it.describe())
				continue
			}
			*dst = append(*dst, it.text)
		}
	}
}

// memSize accepts a size of GPU memory ("20G", "512M").
func (c *checker) memSize(dst *int) func(string, *node) {
	return func(key string, v *node) {
		mb, err := ParseMem(v.text)
		if v.isMap || v.isSeq || err != nil {
			c.fail(v, key, "want a size of GPU memory (20G, 512M), got %s", v.describe())
			return
		}
		*dst = mb
	}
}

// ParseMem reads a size of GPU memory: a number with a unit, M or G (MiB,
// GiB; MB, GB, MiB and GiB are read the same), or T; "20G" is 20480 MiB.
// It returns MiB.
func ParseMem(s string) (int, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("%q: want a size with its unit, such as 20G or 512M", s)
	}
	n, err := strconv.ParseFloat(t[:i], 64)
	unit := strings.ToUpper(strings.TrimSpace(t[i:]))
	mult := map[string]float64{"M": 1, "MB": 1, "MIB": 1, "G": 1024, "GB": 1024, "GIB": 1024, "T": 1 << 20, "TB": 1 << 20, "TIB": 1 << 20}[unit]
	if err != nil || mult == 0 || n <= 0 || n*mult > 1<<30 {
		return 0, fmt.Errorf("%q: want a size with its unit, such as 20G or 512M", s)
	}
	return int(math.Ceil(n * mult)), nil
}

// returns accepts a list of paths relative to the workdir, or one path.
func (c *checker) returns(dst *[]string) func(string, *node) {
	return func(key string, v *node) {
		items := v.items
		if !v.isSeq {
			items = []*node{v}
		}
		*dst = []string{}
		for i, item := range items {
			k := key
			if v.isSeq {
				k = fmt.Sprintf("%s[%d]", key, i)
			}
			if item.isMap || item.isSeq || item.typ == tNull {
				c.fail(item, k, "want paths relative to the workdir ([out/, \"*.json\"]), got %s", item.describe())
				continue
			}
			if err := CheckReturn(item.text); err != nil {
				c.fail(item, k, "%v", err)
				continue
			}
			*dst = append(*dst, item.text)
		}
	}
}

// CheckReturn says what is wrong with p as a path a job returns: it must
// be relative to the workdir, stay under it (no ".."), and fit on a line.
// Bash globs (*, ?, [...], **) are fine.
func CheckReturn(p string) error {
	switch {
	case p == "":
		return errors.New("an empty path to return")
	case strings.ContainsAny(p, "\x00\n\r"):
		return fmt.Errorf("%q: a path to return is one line", p)
	case strings.HasPrefix(p, "/") || strings.HasPrefix(p, "~"):
		return fmt.Errorf("%s: a path to return is relative to the job's workdir", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("%s: a path to return stays under the job's workdir (no ..)", p)
	}
	return nil
}

// ValidModule reports whether s can name a module to load: letters,
// digits and "./_+-@:", as Lmod and Environment Modules name them.
func ValidModule(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("./_+-@:", r)) {
			return false
		}
	}
	return true
}

func (c *checker) env(dst *map[string]string) func(string, *node) {
	return func(key string, v *node) {
		if !v.isMap {
			c.fail(v, key, "want a mapping of variable names to values, got %s", v.describe())
			return
		}
		*dst = map[string]string{}
		for i, name := range v.keys {
			val := v.vals[i]
			k := key + "." + name
			switch {
			case !ValidEnvName(name):
				c.errs = append(c.errs, &Error{File: c.file, Line: v.kline[i], Key: k, Msg: "not a valid environment variable name"})
			case val.isMap || val.isSeq || val.typ == tNull:
				c.fail(val, k, "want a string, got %s", val.describe())
			case strings.IndexByte(val.text, 0) >= 0:
				c.fail(val, k, "must not contain a NUL byte")
			default:
				(*dst)[name] = val.text
			}
		}
	}
}

// ValidEnvName reports whether s can be a shell variable's name.
func ValidEnvName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

func (c *checker) inventory(root *node) *Inventory {
	inv := &Inventory{BusyMemoryMB: defaultBusyMemoryMB}
	defaults := settings{reserveMB: -1}
	var hostsNode *node
	c.fields(root, "", map[string]func(string, *node){
		"defaults":       func(key string, v *node) { c.fields(v, key, c.settingsFields(&defaults)) },
		"ssh_config":     c.str(&inv.SSHConfig),
		"known_hosts":    c.str(&inv.KnownHosts),
		"skip_busy":      c.boolean(&inv.SkipBusy),
		"busy_memory_mb": c.integer(&inv.BusyMemoryMB, 0, 1<<30),
		"max_gpus":       c.integer(&inv.MaxGPUs, 0, 1<<20),
		"hosts":          func(_ string, v *node) { hostsNode = v },
		"hooks": func(key string, v *node) {
			c.fields(v, key, map[string]func(string, *node){"job_end": c.str(&inv.Hooks.JobEnd), "run_end": c.str(&inv.Hooks.RunEnd)})
		},
	})
	inv.Defaults = defaults.Connection
	if inv.SSHConfig != "" && inv.SSHConfig != "none" {
		if _, err := os.Stat(c.path(inv.SSHConfig)); err != nil {
			c.fail(root, "ssh_config", "%v (write `ssh_config: none` to use no ssh_config)", err)
		}
	}
	switch {
	case hostsNode == nil:
		c.fail(root, "hosts", "missing: list at least one host")
	case !hostsNode.isSeq:
		c.fail(hostsNode, "hosts", "want a list of hosts (`- name: node1`), got %s", hostsNode.describe())
	case len(hostsNode.items) == 0:
		c.fail(hostsNode, "hosts", "empty: list at least one host")
	default:
		seen := map[string]int{}
		for i, hn := range hostsNode.items {
			h, ok := c.host(hn, fmt.Sprintf("hosts[%d]", i), defaults)
			if !ok {
				continue
			}
			if first, dup := seen[h.Name]; dup {
				c.fail(hn, fmt.Sprintf("hosts[%d].name", i), "duplicate host %q (first at hosts[%d])", h.Name, first)
				continue
			}
			seen[h.Name] = i
			inv.Hosts = append(inv.Hosts, h)
		}
	}
	return inv
}

// path makes p, relative to the inventory file, usable from here; "~" stays
// for the SSH layer to expand.
func (c *checker) path(p string) string {
	if strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[2:])
		}
	}
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(c.file), p)
}

func (c *checker) host(n *node, path string, defaults settings) (Host, bool) {
	h := Host{Line: n.line}
	s := settings{reserveMB: -1}
	var gpus *node
	before := len(c.errs)
	fields := c.settingsFields(&s)
	fields["name"] = c.str(&h.Name)
	fields["hostname"] = c.str(&s.Hostname)
	fields["address"] = c.str(&h.Address)
	fields["local"] = c.boolean(&h.Local)
	fields["gpus"] = func(_ string, v *node) { gpus = v }
	fields["slurm"] = func(key string, v *node) { h.Slurm = c.slurm(v, key) }
	c.fields(n, path, fields)
	if !n.isMap {
		return h, false
	}
	switch {
	case h.Name == "":
		c.fail(n, path+".name", "missing: every host needs a name (an ssh_config alias or a DNS name)")
	case strings.ContainsAny(h.Name, " \t\n:@,[]="):
		c.fail(n, path+".name", "%q: a host name cannot contain spaces or any of : @ , [ ] =", h.Name)
	}
	switch {
	case h.Slurm != nil && gpus != nil:
		c.fail(gpus, path+".gpus", "a Slurm cluster's GPUs are Slurm's to give: remove gpus (a job asks for N with gpus=N)")
	case h.Slurm != nil:
	case gpus == nil:
		c.fail(n, path+".gpus", "missing: give a list ([0, 1]), a count (4) or \"auto\"")
	default:
		h.GPUs, h.AutoGPUs = c.gpus(gpus, path+".gpus")
	}
	if h.Local && (s.Hostname != "" || s.Port != 0 || s.IdentityFile != "" || s.ProxyJump != "") {
		c.fail(n, path+".local", "a local host is not reached over SSH: remove hostname, port, identity_file and proxy_jump")
	}
	h.Connection = s.Connection
	h.Workdir = cmp.Or(s.workdir, defaults.workdir)
	if sync := cmp.Or(s.sync, defaults.sync); sync != "" {
		h.Sync = c.path(sync)
		if h.Workdir != "" {
			c.fail(n, path+".sync", "sync: makes the snapshot of %s the jobs' workdir: remove workdir: (%s)", sync, h.Workdir)
		}
	}
	h.Setup = cmp.Or(s.setup, defaults.setup)
	h.Return = defaults.returns
	if s.returns != nil {
		h.Return = s.returns
	}
	h.Login = cmp.Or(s.login, defaults.login, LoginPerSlot)
	h.Conda, h.Venv = defaults.conda, defaults.venv
	if s.condaSet {
		h.Conda = s.conda
	}
	if s.venvSet {
		h.Venv = s.venv
	}
	h.Modules = defaults.modules
	if s.modules != nil {
		h.Modules = s.modules
	}
	h.Interactive = cmp.Or(s.shell, defaults.shell) == ShellInteractive
	h.NCCLIfname = cmp.Or(s.ncclIfname, defaults.ncclIfname)
	if h.Slurm != nil && h.Interactive {
		c.fail(n, path+".shell", "a Slurm cluster's jobs run in batch scripts: shell: interactive does not apply (load what you need with conda:, venv:, modules: or setup:)")
	}
	if h.Interactive && h.Login == LoginPerJob {
		c.fail(n, path+".shell", "shell: interactive reads ~/.bashrc once per slot's job shell, which login: per_job has not: drop one of them (or source ~/.bashrc in setup:)")
	}
	h.MemMB = cmp.Or(s.mem, defaults.mem)
	h.MemoryMB = cmp.Or(s.memoryMB, defaults.memoryMB)
	h.ReserveMB = DefaultReserveMB
	for _, r := range []int{defaults.reserveMB, s.reserveMB} {
		if r >= 0 {
			h.ReserveMB = r
		}
	}
	h.MaxPerGPU = cmp.Or(s.maxPerGPU, defaults.maxPerGPU)
	// A host's tags add to the defaults'.
	h.Tags = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(defaults.tags), s.tags...))))
	h.SlotsPerGPU = max(s.slotsPerGPU, 0)
	if h.SlotsPerGPU == 0 {
		h.SlotsPerGPU = max(defaults.slotsPerGPU, 1)
	}
	env := map[string]string{}
	for k, v := range defaults.env {
		env[k] = v
	}
	for k, v := range s.env {
		env[k] = v
	}
	for k, v := range env {
		h.Env = append(h.Env, k+"="+v)
	}
	sort.Strings(h.Env)
	return h, len(c.errs) == before
}

func (c *checker) gpus(v *node, key string) (ids []int, auto bool) {
	const want = `want a list of GPU ids ([0, 1]), a count (4) or "auto"`
	switch {
	case v.isSeq:
		if len(v.items) == 0 {
			c.fail(v, key, "empty: %s", want)
			return nil, false
		}
		for i, item := range v.items {
			id, ok := c.intValue(item)
			if !ok || id < 0 {
				c.fail(item, fmt.Sprintf("%s[%d]", key, i), "want a GPU id (0, 1, ...), got %s", item.describe())
				continue
			}
			ids = append(ids, id)
		}
		return ids, false
	case v.typ == tString && v.text == "auto" && !v.isMap:
		return nil, true
	}
	n, ok := c.intValue(v)
	if !ok || n < 1 || n > maxGPUs {
		c.fail(v, key, "%s, got %s", want, v.describe())
		return nil, false
	}
	for i := 0; i < n; i++ {
		ids = append(ids, i)
	}
	return ids, false
}

// maxGPUs bounds a GPU count; no machine has more.
const maxGPUs = 1024
