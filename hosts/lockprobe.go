package hosts

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"al.essio.dev/pkg/shellescape"
)

// lockKey is the lock file name lock.sh uses for g.
func lockKey(g GPU) string {
	key := g.UUID
	if key == "" {
		key = fmt.Sprintf("index-%d", g.Index)
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, key)
}

// ProbeLocks fills in which gpudispatch run holds each GPU's lock in dir on
// r's machine. It only tries a shared lock, and lets go of it at once, so it
// never stands in a run's way for longer than that.
func ProbeLocks(ctx context.Context, r Runner, dir string, gpus []GPU) error {
	if len(gpus) == 0 {
		return nil
	}
	var keys []string
	for _, g := range gpus {
		keys = append(keys, lockKey(g))
	}
	script := `command -v flock >/dev/null || exit 0
d=` + shellescape.Quote(dir) + `
for k in ` + strings.Join(keys, " ") + `; do
  f=$d/$k
  [ -e "$f" ] || continue
  exec 9<"$f" || continue
  flock -n -s 9 || printf '%s %s\n' "$k" "$(head -n 1 "$f")"
  exec 9<&-
done`
	var out, errOut bytes.Buffer
	code, err := r.Run(ctx, Command{Script: script}, &out, &errOut)
	if err == nil && code != 0 {
		err = fmt.Errorf("looking at GPU locks in %s: exit status %d: %s", dir, code, strings.TrimSpace(errOut.String()))
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out.String(), "\n") {
		key, owner, ok := strings.Cut(line, " ")
		for i := range gpus {
			if ok && lockKey(gpus[i]) == key {
				gpus[i].LockedBy = owner
			}
		}
	}
	return nil
}
