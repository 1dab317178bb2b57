// Subcommands of the `ctitan` program. Each takes the arguments after its name and returns
// the process exit code. main.c only dispatches.
#ifndef CT_COMMANDS_H
#define CT_COMMANDS_H
int ct_cmd_train(int argc, char **argv);      // cli/cmd_train.c
int ct_cmd_tokenizer(int argc, char **argv);  // cli/cmd_tokenizer.c: train | encode | decode
int ct_cmd_data(int argc, char **argv);       // cli/cmd_data.c: prepare
int ct_cmd_generate(int argc, char **argv);   // cli/cmd_generate.c
int ct_cmd_eval(int argc, char **argv);       // cli/cmd_eval.c
int ct_cmd_pipeline(int argc, char **argv);   // cli/cmd_pipeline.c: show
int ct_cmd_convert(int argc, char **argv);    // cli/cmd_convert.c: --to hf | --from hf
int ct_cmd_checkpoint(int argc, char **argv); // cli/cmd_checkpoint.c: list | verify
int ct_cmd_plot(int argc, char **argv);       // cli/cmd_plot.c: loss curves of metrics.jsonl files
int ct_cmd_plan(int argc, char **argv);       // cli/cmd_plan.c: which layout for a model on a cluster
int ct_cmd_kernels(int argc, char **argv);    // cli/cmd_kernels.c: the cpu kernel sets and which run here
#endif
