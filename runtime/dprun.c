/* dprun — placeholder main while the executor is built. */
#include <stdio.h>
int main(void)
{
    fprintf(stderr, "dprun: not built yet\n");
    return 2;
}
