package stats

import (
	"reflect"
	"testing"
)

func TestParseDF(t *testing.T) {
	for _, c := range []struct {
		name, out string
		want      []DiskUsed
	}{
		{"empty", "", []DiskUsed{}},
		{"header only", "Filesystem 1024-blocks Used Available Capacity Mounted on\n", []DiskUsed{}},
		{"three", "Filesystem 1024-blocks Used Available Capacity Mounted on\n" +
			"/dev/sda1 1000 250 750 25% /mnt/data\n" +
			"overlay 2048 1024 1024 50% /\n" +
			"tmpfs 4 0 4 0% /tmp\n",
			[]DiskUsed{{Path: "/mnt/data", UsedBytes: 250 << 10, SizeBytes: 1000 << 10}, {Path: "/", UsedBytes: 1 << 20, SizeBytes: 2 << 20}, {Path: "/tmp", SizeBytes: 4 << 10}}},
		{"a mount point with spaces", "h\nfs 8 4 4 50% /mnt/my data\n", []DiskUsed{{Path: "/mnt/my data", UsedBytes: 4 << 10, SizeBytes: 8 << 10}}},
		{"short and garbled lines skipped", "h\nfs 8 4\nfs x 4 4 50% /a\nfs 8 -4 4 50% /b\nfs 9223372036854775807 1 1 1% /c\nfs 8 4 4 50% /d\n",
			[]DiskUsed{{Path: "/d", UsedBytes: 4 << 10, SizeBytes: 8 << 10}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := parseDF(c.out); !reflect.DeepEqual(got, c.want) {
				t.Errorf("parseDF = %+v, want %+v", got, c.want)
			}
		})
	}
}

// FuzzParseDF: df's output is the sandbox's to write. Whatever it is,
// parseDF answers a list (never nil: the answer's "disk" is []), every
// entry with sizes that are bytes (whole KiB, not negative) and a path.
func FuzzParseDF(f *testing.F) {
	f.Add("Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/sda1 1000 250 750 25% /mnt/data\n")
	f.Add("h\nfs 9223372036854775807 -1 0 0% /\n")
	f.Add("\n\n\n")
	f.Fuzz(func(t *testing.T, out string) {
		disk := parseDF(out)
		if disk == nil {
			t.Fatal("nil list")
		}
		for _, d := range disk {
			if d.UsedBytes < 0 || d.SizeBytes < 0 || d.UsedBytes%1024 != 0 || d.SizeBytes%1024 != 0 || d.Path == "" {
				t.Fatalf("entry %+v of %q", d, out)
			}
		}
	})
}
