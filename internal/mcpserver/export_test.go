package mcpserver

// MaxSessions is the bound of an org's open sessions, for the tests.
const MaxSessions = maxSessions
