// The one clock every timing in ctitan reads: monotonic seconds (step times, the executor's
// timeline, communication waits).
#ifndef CT_CLOCK_H
#define CT_CLOCK_H
double ct_now_seconds(void);
#endif
