package inventory

import (
	"errors"
	"os"
	"path/filepath"
)

// Find returns the first inventory file that exists among the places searched
// when --inventory is not given: ./gpudispatch.yaml, then
// ~/.config/gpudispatch/inventory.yaml. ($GPUDISPATCH_INVENTORY is the
// --inventory flag itself, read by the command line.) It returns "" when
// there is none.
func Find() (string, error) {
	candidates := []string{"gpudispatch.yaml"}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, ".config", "gpudispatch", "inventory.yaml"))
	}
	for _, c := range candidates {
		_, err := os.Stat(c)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	return "", nil
}
