"""The test kit: what the tests drive the product with, written once.

- ``agent``: the agent in process, no host, no daemon (``make_agent``), its log's fsync
  on virtual time (``VirtualSyncLog``);
- ``daemon``: ``quiesce serve`` as a subprocess driven through agent turns
  (``agent_daemon``, ``Agent.stop_and_check``, ``kill_under``), and holding its host
  still;
- ``host``: a real host subprocess driven over its link, as the runtime drives it
  (``running_host``);
- ``answers``: a client's answers to permission prompts (allow, deny, never), for both;
- ``acpclient``: ``quiesce acp`` driven by the official ACP SDK (``acp_agent``, ``Editor``);
- ``lineclient``: newline-delimited JSON-RPC over a byte stream (stdio, ``unix:``, ops);
- ``rawclient``: bytes to ``quiesce serve``'s stdin, answer lines back;
- ``socketclient``: ``quiesce serve --listen``, its WebSocket and Unix socket clients,
  and a session whose plugin call ignores its cancel;
- ``waiters``: waiting, with a deadline, on files, processes and output.

Every check of a session log's balance asks the transcript rulebook
(``protocol.transcript``). Processes a test starts are marked and found by
``tests.support``.
"""
