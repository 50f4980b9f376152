"""The sans-I/O MRC transport: registered memory, EV table, SACK and scoreboard, congestion control, the queue pair."""
