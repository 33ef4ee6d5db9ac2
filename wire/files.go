package wire

// Written is what a write did (POST /v1/sandbox/{id}/fs, and the typed op
// write).
type Written struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Woken bool   `json:"woken,omitempty"`
}

// Extracted is an unpacked archive (POST /v1/sandbox/{id}/fs/archive).
type Extracted struct {
	Path    string `json:"path"`
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
}

// ReadResult is the typed op read's answer: a file (Data when it is UTF-8
// text, and always DataBase64) or a directory (Entries, directories
// ending in '/').
type ReadResult struct {
	Path       string   `json:"path"`
	Kind       string   `json:"kind"` // "file" or "directory"
	Dir        bool     `json:"dir"`  // kind is "directory" (the reference's field)
	Size       int      `json:"size,omitempty"`
	Data       *string  `json:"data,omitempty"`
	DataBase64 string   `json:"dataBase64,omitempty"`
	Entries    []string `json:"entries,omitempty"`
	Woken      bool     `json:"woken,omitempty"`
}

// FileEvent is one change under a watched directory (GET
// /v1/sandbox/{id}/fs/watch, one per server-sent event's data): Type is
// created, written (a burst of writes, once it settled), removed or
// renamed (the old name; the new one is created), or overflow (changes
// were missed: the kernel's queue overflowed, or the stream resumed);
// Name is the path under the watched directory.
type FileEvent struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
}
