package executor

import (
	"encoding/json"
	"testing"
)

// A GPU's id is its index, a MIG instance's "GPU:device"; in JSON a GPU's
// stays a number (journals written before MIG read the same), a MIG
// instance's is that string.
func TestGPUID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id    GPUID
		text  string
		json  string
		gpu   int
		dev   int
		isMIG bool
	}{
		{id: 3, text: "3", json: "3", gpu: 3},
		{id: MIGID(0, 2), text: "0:2", json: `"0:2"`, gpu: 0, dev: 2, isMIG: true},
		{id: MIGID(7, 6), text: "7:6", json: `"7:6"`, gpu: 7, dev: 6, isMIG: true},
	}
	for _, tt := range tests {
		dev, mig := tt.id.MIG()
		if tt.id.String() != tt.text || tt.id.GPU() != tt.gpu || mig != tt.isMIG || mig && dev != tt.dev {
			t.Errorf("%d: %q GPU %d MIG %d,%v; want %q %d %d,%v", tt.id, tt.id, tt.id.GPU(), dev, mig, tt.text, tt.gpu, tt.dev, tt.isMIG)
		}
		b, err := json.Marshal(tt.id)
		if err != nil || string(b) != tt.json {
			t.Errorf("%s: JSON %s, %v; want %s", tt.text, b, err, tt.json)
		}
		var back GPUID
		if err := json.Unmarshal(b, &back); err != nil || back != tt.id {
			t.Errorf("%s: back from JSON %v, %v", tt.text, back, err)
		}
		if p, err := ParseGPUID(tt.text); err != nil || p != tt.id {
			t.Errorf("%s: parsed %v, %v", tt.text, p, err)
		}
	}
	for _, bad := range []string{"", "x", "-1", "0:", ":1", "0:-1", "0:256", "65536", `"0:x"`} {
		if _, err := ParseGPUID(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	var ids []GPUID
	if err := json.Unmarshal([]byte(`[0, 1, "0:3"]`), &ids); err != nil || GPUIDs(ids) != "0,1,0:3" {
		t.Errorf("a list: %v, %v", ids, err)
	}
}
