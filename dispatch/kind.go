package dispatch

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The kind of GPU a job needs. A job may say what GPU it needs: a model
// ([model=A100|H100]: the name nvidia-smi gives contains one of them, in
// any case), at least some memory ([vram=40G]), and tags its host must
// have ([tags=nvlink]: the inventory's tags:). What a GPU is comes from the
// run's looks at its host (usage.go): until its host's first look answers,
// no job goes there, and a job that needs a model or memory does not go
// to a GPU whose name or memory nvidia-smi did not give. A Slurm cluster
// names the types of its GPUs (gres types, "a100", as sinfo said when it
// was opened): a job whose model= one of them contains is sent there with
// --gres=gpu:TYPE:N (the first such type), one that needs another model,
// or memory, is not (tags still apply). A job that no GPU of the lab can
// ever suit is rejected with what the lab has, once every host has
// answered; before, it waits.

// Kind is the kind of GPU jobs need whose lines do not say: a run's
// (--model, --vram, --tags) or a submitted batch's. Each of its parts
// applies alone: a line with model= keeps the run's vram=.
type Kind struct {
	Models []string
	VRAMMB int
	Tags   []string
}

// ParseKind reads the values of --model, --vram and --tags as a job line's
// model=, vram= and tags= ("": not said).
func ParseKind(model, vram, tags string) (Kind, error) {
	var j Job
	for key, val := range map[string]string{"model": model, "vram": vram, "tags": tags} {
		if val == "" {
			continue
		}
		if err := parseOptions(&j, []string{key + "=" + val}); err != nil {
			return Kind{}, fmt.Errorf("--%s: %w", key, err)
		}
	}
	return Kind{Models: j.Models, VRAMMB: j.VRAMMB, Tags: j.Tags}, nil
}

// or is k, with o's parts where k says none.
func (k Kind) or(o Kind) Kind {
	if len(k.Models) == 0 {
		k.Models = o.Models
	}
	if k.VRAMMB == 0 {
		k.VRAMMB = o.VRAMMB
	}
	if len(k.Tags) == 0 {
		k.Tags = o.Tags
	}
	return k
}

// words are k as options of a job line.
func (k Kind) words() []string {
	var w []string
	if len(k.Models) > 0 {
		w = append(w, "model="+strings.Join(k.Models, "|"))
	}
	if k.VRAMMB > 0 {
		w = append(w, "vram="+strconv.Itoa(k.VRAMMB)+"M")
	}
	if len(k.Tags) > 0 {
		w = append(w, "tags="+strings.Join(k.Tags, ","))
	}
	return w
}

// setKind records what a look says g is: its name and memory ("" and 0:
// not said).
func (g *gpu) setKind(model string, vramMB int) {
	g.model, g.modelKey, g.vramMB = model, strings.ToLower(model), vramMB
}

// suits reports whether g is of the kind j needs (its host's tags aside).
// It runs for every GPU a job may get on every pass: it compares words
// lowered once.
func (g *gpu) suits(j *Job) bool {
	if j.VRAMMB > 0 && g.vramMB < j.VRAMMB {
		return false
	}
	if len(j.Models) == 0 {
		return true
	}
	if len(j.modelKeys) != len(j.Models) {
		j.modelKeys = make([]string, len(j.Models))
		for i, m := range j.Models {
			j.modelKeys[i] = strings.ToLower(m)
		}
	}
	return g.modelKey != "" && slices.ContainsFunc(j.modelKeys, func(m string) bool { return strings.Contains(g.modelKey, m) })
}

// tagged reports whether h may run j by its tags and, for a Slurm
// cluster, by the types of its GPUs.
func (h *hostSlots) tagged(j *Job) bool {
	if h.cluster && (j.VRAMMB > 0 || len(j.Models) > 0 && h.gresType(j) == "") {
		return false
	}
	return h.hasTags(j)
}

// gresType is the first of cluster h's GPU types that names a model j
// asks for ("a100" for model=A100), or "".
func (h *hostSlots) gresType(j *Job) string {
	for _, t := range h.gres {
		if slices.ContainsFunc(j.Models, func(m string) bool { return strings.Contains(strings.ToLower(t), strings.ToLower(m)) }) {
			return t
		}
	}
	return ""
}

// hasTags reports whether h has the tags j asks for.
func (h *hostSlots) hasTags(j *Job) bool {
	for _, t := range j.Tags {
		if !slices.Contains(h.host.Tags, t) {
			return false
		}
	}
	return true
}

// needsKind reports whether j says what kind of GPU it needs.
func (j *Job) needsKind() bool { return len(j.Models) > 0 || j.VRAMMB > 0 || len(j.Tags) > 0 }

// checkKind says why no GPU of the lab suits j, with what the lab has, or
// nil. A host not looked at yet may suit it: then it is nil too, and final
// is false.
func (t *slotTable) checkKind(j *Job) (final bool, err error) {
	if !j.needsKind() {
		return true, nil
	}
	// A job over N hosts needs N hosts with GPUs enough of its kind.
	need, unknown := max(j.Nodes, 1), false
	for _, h := range t.candidates(j) {
		if !h.fits(j) {
			continue
		}
		if h.cluster && !h.watched && !h.removed && len(j.Models) > 0 && j.VRAMMB == 0 && h.hasTags(j) {
			return false, nil // its GPU types are known once it is opened
		}
		if h.removed || !h.tagged(j) {
			continue
		}
		if h.cluster {
			return true, nil
		}
		if h.unseen || h.opening || h.down && !h.looked {
			unknown = true // not known yet
			continue
		}
		n := 0
		for _, g := range h.gpus {
			if g.cap > 0 && g.mayRun(j) {
				n++
			}
		}
		if n >= h.need(j) {
			if need--; need == 0 {
				return true, nil
			}
		}
	}
	if unknown {
		return false, nil
	}
	final = t.unseenUp == 0
	if j.Nodes > 1 {
		return final, fmt.Errorf("%s: fewer than %d hosts have %s of that kind (the lab has: %s)", kindWords(j), j.Nodes, Count(j.GPUs, "GPU"), t.labKinds())
	}
	return final, fmt.Errorf("%s: no GPU of the lab is one (the lab has: %s)", kindWords(j), t.labKinds())
}

// kindWords says what j asks for, as written: "model=A100|H100 vram=40G".
func kindWords(j *Job) string {
	var w []string
	if len(j.Models) > 0 {
		w = append(w, "model="+strings.Join(j.Models, "|"))
	}
	if j.VRAMMB > 0 {
		w = append(w, "vram="+MemWords(j.VRAMMB))
	}
	if len(j.Tags) > 0 {
		w = append(w, "tags="+strings.Join(j.Tags, ","))
	}
	return strings.Join(w, " ")
}

// labKinds says what the lab's hosts have: "node1: 4× NVIDIA A100 80GB
// (81920 MiB), tags nvlink; node2: …".
func (t *slotTable) labKinds() string {
	var hosts []string
	for _, h := range t.hosts {
		if h.removed {
			continue
		}
		if h.cluster {
			desc := h.host.Name + ": a Slurm cluster that names no GPU type"
			if len(h.gres) > 0 {
				desc = h.host.Name + ": a Slurm cluster, gres types " + strings.Join(h.gres, ",")
			}
			hosts = append(hosts, desc)
			continue
		}
		count := map[string]int{}
		for _, g := range h.gpus {
			if g.cap > 0 {
				k := g.model
				if k == "" {
					k = "a GPU nvidia-smi did not name"
				}
				if g.vramMB > 0 {
					k += fmt.Sprintf(" (%d MiB)", g.vramMB)
				}
				count[k]++
			}
		}
		kinds := make([]string, 0, len(count))
		for k, n := range count {
			kinds = append(kinds, fmt.Sprintf("%d× %s", n, k))
		}
		sort.Strings(kinds)
		desc := h.host.Name + ": " + strings.Join(kinds, ", ")
		if len(kinds) == 0 {
			desc = h.host.Name + ": no GPU"
		}
		if len(h.host.Tags) > 0 {
			desc += ", tags " + strings.Join(h.host.Tags, ",")
		}
		hosts = append(hosts, desc)
	}
	return strings.Join(hosts, "; ")
}
