"""`liverl down`: stop every process `liverl up` started, by PID."""


def add_arguments(parser) -> None:
    pass


def run(config, args) -> int:
    from infra.embedded.stack import down

    if down(config) == 0:
        print("nothing was running")
    return 0
