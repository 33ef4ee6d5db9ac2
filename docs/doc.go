// Package docs holds the project's documentation (the Markdown files of
// this directory) and no code: its tests keep the docs true to the code.
// TestConfigurationDoc renders `sandbox serve -h` into configuration.md
// and fails when the file differs; TestDocExamples runs the README's and
// the API guide's examples marked `sh test` against a real server.
package docs
