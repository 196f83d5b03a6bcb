"""The job model every engine shares: what a user asks to run, read once and checked once.

    spec.py         JobSpec: a gang, its command line, environment, image, hints
    commandline.py  a user's line (mpirun, horovodrun, torchrun, a plain program) read and
                    prepared for a gang: what is replaced, refused or noted
    states.py       job and instance states and their transitions
    views.py        the read models every engine returns and the CLI renders
    codec.py        specs and nodes as JSON; stored placements and reservations read back
    logfiles.py     which instance a user means, reading and following a log
    prediction.py   the model's images/s for a job's placement and for the other policy's

Imports the scheduler, topology and model only: never an engine or the rank runtime.
"""
