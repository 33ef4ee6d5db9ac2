-- Prepaid balances for the meter, in cents. An org without a row has 0.
CREATE TABLE credits (
	org   TEXT PRIMARY KEY,
	cents INTEGER NOT NULL
);
