package wire

import "encoding/base64"

// OutputText is what a process wrote after an offset, at once (GET
// .../processes/{pid}/output as JSON, and the typed op process_output):
// text when it is UTF-8, else base64 (StdoutBase64, StderrBase64).
type OutputText struct {
	Stdout       string `json:"stdout"`
	Stderr       string `json:"stderr"`
	StdoutBase64 string `json:"stdoutBase64,omitempty"`
	StderrBase64 string `json:"stderrBase64,omitempty"`
	// DroppedBytes is output after from that is no longer kept (the
	// server keeps the last 1 MiB).
	DroppedBytes int64 `json:"droppedBytes,omitempty"`
	// Next is the offset to ask from next time.
	Next    int64    `json:"next"`
	Process *Process `json:"process"`
}

// StdoutBytes is the stdout, decoded.
func (o *OutputText) StdoutBytes() []byte { return textOr64(o.Stdout, o.StdoutBase64) }

// StderrBytes is the stderr, decoded.
func (o *OutputText) StderrBytes() []byte { return textOr64(o.Stderr, o.StderrBase64) }

func textOr64(text, b64 string) []byte {
	if b64 == "" {
		return []byte(text)
	}
	b, _ := base64.StdEncoding.DecodeString(b64)
	return b
}

// StdinResult says what POST .../processes/{pid}/stdin wrote.
type StdinResult struct {
	Written int64   `json:"written"`
	Process Process `json:"process"`
}

// Ticket is a single-use ticket for a terminal or screen socket.
type Ticket struct {
	Ticket    string `json:"ticket"`
	ExpiresIn int    `json:"expiresIn"`
	URL       string `json:"url"`
}
