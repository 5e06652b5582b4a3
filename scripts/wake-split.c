// How late a timed sleep wakes on this host, split into the runqueue wait (schedstat's
// run_delay: the thread was runnable, the CPUs were busy) and the rest (timer, switch).
// Used for docs/run.md's emulated libaio figures (issue 22):
//   gcc -O2 -o /tmp/wake-split scripts/wake-split.c && /tmp/wake-split 300 10000   # 300 sleeps of 10 ms
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <unistd.h>
static long long now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000LL+t.tv_nsec;}
static long long run_delay(void){char b[128];int fd=open("/proc/thread-self/schedstat",O_RDONLY);int n=read(fd,b,127);close(fd);b[n>0?n:0]=0;long long a,d;sscanf(b,"%lld %lld",&a,&d);return d;}
int main(int c,char**v){int n=atoi(v[1]);long long ns=atoll(v[2])*1000;prctl(PR_SET_TIMERSLACK,1);
 long long late=0,rq=0;for(int i=0;i<n;i++){long long d0=run_delay();long long t=now()+ns;struct timespec ts={t/1000000000LL,t%1000000000LL};
 clock_nanosleep(CLOCK_MONOTONIC,TIMER_ABSTIME,&ts,0);long long l=now()-t;long long d1=run_delay();late+=l;rq+=d1-d0;}
 printf("sleeps %d of %lld us: late mean %.1f us, of it runqueue wait %.1f us, the rest (timer, switch) %.1f us\n",n,ns/1000,late/1e3/n,rq/1e3/n,(late-rq)/1e3/n);}
