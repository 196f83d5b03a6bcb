"""Real hosts over ssh: a placed gang's ranks start on the nodes that have an `address`, through
Open MPI's own ssh launcher (`mpirun -H`), with no agent of ringleader's on the hosts — only
python3 (for the rank wrapper, sent as source) and the job's own program.

    ssh.py      the ssh client configuration, remote commands, topology discovery over ssh
    launch.py   the mpirun line for a placement, and the rank table the remote wrappers read
    demux.py    the head's side: mpirun's tagged output split into per-rank logs and states
    netns.py    an emulated cluster on one box: a network namespace, sshd and shaped link per node
"""
