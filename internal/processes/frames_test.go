package processes

import (
	"bytes"
	"testing"
)

// FuzzReadFrames: the daemon's stream comes from inside the sandbox. No
// input may panic the parser, make it hand out more data than a frame
// allows, or a negative offset.
func FuzzReadFrames(f *testing.F) {
	f.Add([]byte("{\"s\":\"stdout\",\"o\":0,\"n\":3}\nabc{\"s\":\"end\",\"p\":{\"pid\":3,\"output\":3}}\n"))
	f.Add([]byte("{\"s\":\"dropped\",\"o\":100,\"n\":100}\n{\"s\":\"ping\"}\n"))
	f.Add([]byte("{\"boot\":\"x\",\"error\":\"no such process\"}\n"))
	f.Add([]byte("{\"s\":\"stderr\",\"o\":5,\"n\":99999999}\nab"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ReadFrames(bytes.NewReader(b), func(fr Frame, data []byte) error {
			if len(data) > maxFrameData || fr.Off < 0 || fr.N < 0 {
				t.Fatalf("frame %+v with %d bytes", fr, len(data))
			}
			if (fr.S == "stdout" || fr.S == "stderr") && len(data) != fr.N {
				t.Fatalf("frame %+v with %d bytes", fr, len(data))
			}
			return nil
		})
	})
}
