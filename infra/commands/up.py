"""`liverl up`: start the embedded broker and MLflow server, create the topics, record the PIDs."""


def add_arguments(parser) -> None:
    parser.add_argument("--memory", action="store_true", help="keep broker data in memory (lost on stop)")


def run(config, args) -> int:
    from infra.embedded.stack import up

    if args.memory:
        config.stack.broker_storage = "memory"
    up(config)
    print(f"stack up; data in {config.stack.data_dir}; stop it with `liverl down`")
    return 0
