package image

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkDeriveCopy: what charging a snapshot's copy of its base adds —
// copyCost's walk of the class image's directories — beside the copy
// itself (cp -a --link of the same rootfs), side by side.
//
//	SANDBOX_TEST_IMAGES=/var/lib/sandbox/images go test -run '^$' -bench DeriveCopy -benchtime 5x ./internal/image/
func BenchmarkDeriveCopy(b *testing.B) {
	dir := os.Getenv("SANDBOX_TEST_IMAGES")
	if dir == "" {
		dir = DefaultDir
	}
	base, err := Rootfs(dir, "exec")
	if err != nil {
		b.Skip(err)
	}
	b.Run("copy", func(b *testing.B) {
		dir := b.TempDir()
		for i := 0; b.Loop(); i++ {
			dst := filepath.Join(dir, "rootfs")
			if out, err := exec.Command("cp", "-a", "--link", base, dst).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			b.StopTimer()
			os.RemoveAll(dst)
			b.StartTimer()
		}
	})
	b.Run("charge", func(b *testing.B) {
		for b.Loop() {
			if _, err := copyCost(context.Background(), base, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}
