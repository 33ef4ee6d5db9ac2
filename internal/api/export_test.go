package api

// MaxPerKey is the bound on one key's open requests.
const MaxPerKey = maxPerKey
